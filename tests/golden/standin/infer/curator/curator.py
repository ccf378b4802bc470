"""A stand-in for the inference side's curator module: a template that uses what
``str.format`` offers (literal braces, format specs) and non-ASCII text."""

CURATOR_PROMPT = """\
Kurator — Bibliothek v{version:>4} ({n_cards:03d} Karten) · 技能ライブラリ
Antworte als JSON: {{"ops": [{{"op": "add_card", "card_id": "…"}}]}} — höchstens {max_ops} Ops.

## Werkzeuge
{tool_specs}

## Katalog
{skill_catalog}

## Letzte Quittung
«{last_receipt}»

{analysis_block}

## Parameterregel
{param_rule}
{{ende}}
"""

PARAM_RULE_ON = "- Parameter {strikt}: nur «trigger» und «program» ändern; keine Zähler."
