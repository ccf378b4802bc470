TOOL_SPECS = {
    "add_card": {"description": "fügt eine Karte hinzu {card_id, trigger, program}"},
    "update_card": {"description": "ändert «trigger» oder «program» einer Karte"},
    "delete_card": {"description": "löscht eine Karte — 削除"},
}
