"""The text the sample runs are made of: OVO-Bench task codes, objects, places, procedures."""

from __future__ import annotations

TASKS: tuple[str, ...] = (
    "EPM",
    "ASI",
    "HLD",
    "STU",
    "OJR",
    "ATR",
    "ACR",
    "OCR",
    "FPD",
    "REC",
    "SSR",
    "CRR",
)


LETTERS = ("A", "B", "C", "D")
_OBJECTS = (
    "mug",
    "screwdriver",
    "cutting board",
    "laptop",
    "backpack",
    "frying pan",
    "water bottle",
    "pair of scissors",
    "notebook",
    "tomato",
    "remote control",
    "paint brush",
    "wrench",
    "glass jar",
    "phone",
    "spatula",
    "measuring tape",
    "towel",
)


_PLACES = (
    "on the kitchen counter",
    "inside the top drawer",
    "on the wall shelf",
    "in the sink",
    "on the desk",
    "next to the stove",
    "on the floor",
    "in the fridge",
    "in the cardboard box",
    "on the windowsill",
)


_ACTIONS = (
    "chopping onions",
    "washing hands",
    "stirring the pot",
    "opening the fridge",
    "tightening a bolt",
    "folding laundry",
    "pouring water",
    "typing on a keyboard",
    "sanding a plank",
    "cracking an egg",
    "wiping the table",
    "peeling a potato",
)


_REPEATS = (
    ("stirred the pot", "stirring"),
    ("opened the cabinet", "opening the cabinet"),
    ("hammered the nail", "hammering"),
    ("dribbled the ball", "dribbling"),
    ("flipped the pancake", "flipping"),
    ("jumped over the rope", "jumping rope"),
)


_COLORS = ("red", "blue", "green", "black", "white", "yellow", "silver", "orange", "purple")
_RELATIONS = ("to the left of", "to the right of", "behind", "on top of", "in front of", "under")
_SIGNS = ("whiteboard", "shop sign", "laptop screen", "cereal box", "street sign", "jar label")
_TEXTS = (
    '"EXIT"',
    '"OPEN 24 HOURS"',
    '"Aisle 7"',
    '"SALE 50% OFF"',
    '"Platform 3"',
    '"def f(x): return {x}"',
    "\"print('{}'.format(n))\"",
    '"Room 214"',
    '"NO PARKING"',
    '"Caution: Wet Floor"',
    '"f(x) = {x + 1}"',
    '"Batch {}: done"',
)


_PROCEDURES = (
    (
        "changing a bike tire",
        (
            "remove the wheel",
            "take out the inner tube",
            "patch the hole",
            "inflate the tire",
            "reattach the wheel",
        ),
    ),
    (
        "making pancakes",
        (
            "whisk the batter",
            "heat the pan",
            "pour the batter",
            "flip the pancake",
            "plate the pancake",
        ),
    ),
    (
        "assembling a shelf",
        (
            "lay out the panels",
            "insert the dowels",
            "attach the side panels",
            "screw in the back board",
            "mount the shelves",
        ),
    ),
    (
        "replacing a faucet",
        (
            "shut off the water",
            "disconnect the supply lines",
            "remove the old faucet",
            "seat the new faucet",
            "reconnect the lines",
        ),
    ),
)


_NONASCII_SUFFIXES = (
    " Note: the sign in the background says “Café Olé”.",
    " The subtitles are in Japanese (日本語の字幕).",
    " Ignore the naïve first impression — wait for clear evidence.",
    " Answer as soon as the evidence appears — not before.",
    " Context: a crème brûlée is being prepared.",
    " The street sign reads “Hauptstraße”.",
    " The narrator asks: ¿dónde está la llave?",
)


_BRACE_SUFFIXES = (
    " Respond in the format {letter}.",
    " (The overlay template shows '{}'.)",
    " Use the frame index {frame_idx} if it helps.",
)


_TRIGGER_PHRASES = {
    "EPM": (
        "where an object was last seen earlier in the stream",
        "what the camera wearer did with an item before the current moment",
    ),
    "ASI": (
        "for the order in which actions were performed so far",
        "which action came immediately before or after a reference action",
    ),
    "HLD": (
        "about an object or event that may never have appeared in the video",
        "which option is not supported by anything seen so far",
    ),
    "STU": (
        "where an object is located relative to another object right now",
        "about left/right or front/behind relations in the current frame",
    ),
    "OJR": (
        "which object the person is currently holding or showing",
        "to identify an object visible at the query time",
    ),
    "ATR": (
        "about the color, size or material of a visible object",
        "to compare attributes of objects in the current frame",
    ),
    "ACR": ("what action is happening at the query time", "what the person is doing right now"),
    "OCR": (
        "to read text shown on a screen, a sign or a label",
        "what is written on an object in view",
    ),
    "FPD": (
        "what will most likely happen next in the stream",
        "to predict the person's next action",
    ),
    "REC": (
        "how many times an action has been repeated so far",
        "to count repetitions of a periodic action up to now",
    ),
    "SSR": (
        "which procedural step has just been completed",
        "whether a specific step of a procedure is finished yet",
    ),
    "CRR": (
        "about something whose answer is revealed only later in the stream",
        "a question that requires waiting for a clue before responding",
    ),
}


_TRIGGER_CLAUSES = (
    ", especially when the relevant frames are far from the query time",
    " and the options differ only in fine-grained visual details",
    ", and the video is egocentric with rapid camera motion",
    " while several similar objects are visible at once",
    ", even if the question wording is indirect or uses pronouns",
    " and earlier answers in the same stream may be stale",
)


_NONASCII_CLAUSES = (
    " — check the subtitles (日本語の字幕) first",
    ", e.g. a café menu board",
    " without making a naïve guess",
)


_BRACE_CLAUSES = (
    " referencing a timestamp like {frame_idx}",
    " where the prompt contains a template such as {}",
    " using the slot {object} from the question",
)


_TASK_STEPS = {
    "EPM": "Scan backward from the query time and find the last frame showing the object.",
    "ASI": "Segment the history into atomic actions and order them by start time.",
    "HLD": "Check each option against the recorded object list; unseen items are suspects.",
    "STU": "Localize both objects in the latest frame and compare their bounding boxes.",
    "OJR": "Crop the hands region in the latest frame and name the held object.",
    "ATR": "Zoom on the target object and read off its dominant color and material.",
    "ACR": "Sample the last 3 seconds densely and describe the motion of the hands.",
    "OCR": "Find text regions in the latest frame and transcribe them character by character.",
    "FPD": "Identify the current step of the activity and the usual step that follows it.",
    "REC": "Mark every completed cycle of the action and count the marks.",
    "SSR": "Match the observed steps to the canonical procedure and find the last done one.",
    "CRR": "If the clue has not appeared yet, keep watching instead of answering.",
}


_GENERIC_STEPS = (
    "Locate the query timestamp and sample frames from the preceding 30 seconds.",
    "List every candidate mentioned in the options before looking at the frames.",
    "Compare each option against the visual evidence and eliminate contradictions.",
    "Prefer evidence from frames closest to the query time over older frames.",
    "Re-read the question for negations such as 'not' or 'never'.",
    "If two options remain, look for a distinguishing detail in a higher-resolution crop.",
)


_FINAL_STEPS = (
    "Answer with the single best option letter.",
    "Pick the option with the strongest direct visual support.",
    "If nothing supports any option, choose the one stating the event did not occur.",
)


_VIDEO_SOURCES = (
    "ego4d",
    "epic_kitchens",
    "coin",
    "youcook2",
    "cross_task",
    "perception_test",
    "star",
    "thumos",
    "moviechat",
    "hirest",
)
