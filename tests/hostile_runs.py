"""The hostile corpus: links, FIFOs, sockets, odd names, secrets outside the runs folder."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from statepool_dagster.demo.sample_runs import generate_run

from broken_runs import SPEC

SECRET = "TOP-SECRET-outside-the-runs-folder"


@dataclass
class HostileCorpus:
    """Run folders built to hang, crash or fool a reader; what each one must come to.

    ``rejects``: run -> {(file relative to the runs folder, line or None): error fragment};
    ``ignored``: run -> {file name: reason fragment} (listed, never read);
    ``seed_equal``: runs the original reads: their states must be byte-identical to its.
    """

    runs: Path
    rejects: dict[str, dict[tuple[str, int | None], str]] = field(default_factory=dict)
    ignored: dict[str, dict[str, str]] = field(default_factory=dict)
    seed_equal: list[str] = field(default_factory=list)


def _episode_lines(run: Path) -> list[bytes]:
    return (run / "episodes.jsonl").read_bytes().splitlines()


def _bind_socket(path: Path) -> None:
    """A Unix socket file at ``path`` (bound from its folder: socket paths are short)."""
    import os
    import socket

    here = os.getcwd()
    os.chdir(path.parent)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path.name)
        sock.close()  # the file stays; nobody listens
    finally:
        os.chdir(here)


def python_json_run(run: Path, index: int) -> None:
    """What only Python's json reads, and the original keeps: NaN, infinities, 1e999,
    integral float versions, a huge integer in a float field, a huge declared version,
    a bare-CR line end, NaN in an embedding; plus fast-path traps the exact reader gets right.
    """
    generate_run(run, SPEC, index)
    lines = _episode_lines(run)
    records = [json.loads(line) for line in lines]
    out = []
    for i, record in enumerate(records):
        text = json.dumps(record, ensure_ascii=False)
        if i == 0:
            text = text[:-1] + ', "score": NaN, "hi": Infinity, "lo": -Infinity, "big": 1e999}'
        if i == 1:
            v = record["skill_lib_version"]
            text = text.replace(f'"skill_lib_version": {v}', f'"skill_lib_version": {v}.0')
        if i == 2:
            text = text[:-1] + ', "realtime": ' + "9" * 400 + "}"
        out.append(text.encode("utf-8"))
    # bare CR between the first lines (universal newlines), LF after
    data = b"\r".join(out[:3]) + b"\r" + b"\n".join(out[3:]) + b"\n"
    (run / "episodes.jsonl").write_bytes(data)
    snaps = run / "snapshots"
    lib = json.loads((snaps / "skills_v1.json").read_bytes())
    lib["version"] = 10**30
    text = json.dumps(lib)
    text = text.replace('"_trigger_emb": [', '"_trigger_emb": [NaN, ', 1)
    (snaps / "skills_v1.json").write_text(text, encoding="utf-8")
    lib = json.loads((snaps / "skills_v2.json").read_bytes())
    card = lib["cards"][0]
    emb = card.pop("_trigger_emb")
    # the card's own key spelled with an escape, a look-alike nested in meta_info, a key
    # that merely ends in the text, and the text inside a string: all kept as json reads them
    card["meta_info"] = {
        "_trigger_emb": [5, 6],
        'x"_trigger_emb': [7],
        "note": '"_trigger_emb": [8]',
        **card.get("meta_info", {}),
    }
    body = json.dumps(lib)
    own = '"\\u005ftrigger_emb": ' + json.dumps(emb)
    body = body.replace('"card_id": ', own + ', "card_id": ', 1)
    (snaps / "skills_v2.json").write_text(body, encoding="utf-8")


def build_hostile_corpus(runs: Path, outside: Path) -> HostileCorpus:
    """A runs folder of hostile runs; none may hang, crash a run, or change a state silently."""
    import os

    runs.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    corpus = HostileCorpus(runs)

    python_json_run(runs / "py_json", 20)
    corpus.seed_equal.append("py_json")

    run = runs / "special_files"
    generate_run(run, SPEC, 21)
    snaps = run / "snapshots"
    (snaps / "skills_v1.json").unlink()
    os.mkfifo(snaps / "skills_v1.json")
    (snaps / "skills_v2.json").unlink()
    (snaps / "skills_v2.json").mkdir()
    (snaps / "skills_v3.json").unlink()
    _bind_socket(snaps / "skills_v3.json")
    (run / "analyses").mkdir()
    os.mkfifo(run / "analyses" / "analysis_v1.json")
    corpus.rejects["special_files"] = {
        ("special_files/snapshots/skills_v1.json", None): "FIFO",
        ("special_files/snapshots/skills_v2.json", None): "directory",
        ("special_files/snapshots/skills_v3.json", None): "socket",
        ("special_files/analyses/analysis_v1.json", None): "FIFO",
    }

    run = runs / "links"
    generate_run(run, SPEC, 22)
    snaps = run / "snapshots"
    secret = json.loads((snaps / "skills_v1.json").read_bytes())
    secret["cards"][0]["trigger"] = SECRET
    (outside / "secret.json").write_text(json.dumps(secret), encoding="utf-8")
    (snaps / "skills_v1.json").unlink()
    (snaps / "skills_v1.json").symlink_to(outside / "secret.json")
    (snaps / "skills_v2.json").unlink()
    (snaps / "skills_v2.json").symlink_to(snaps / "skills_v2.json")
    (snaps / "skills_v3.json").unlink()
    (snaps / "skills_v3.json").symlink_to("/dev/zero")
    # a link that stays inside the run is read like the file it points to
    (run / "kept").mkdir()
    (snaps / "skills_v0.json").rename(run / "kept" / "v0.json")
    (snaps / "skills_v0.json").symlink_to(Path("..") / "kept" / "v0.json")
    # sidecars: a link into another run (outside this one), a dangling link
    (run / "receipts").mkdir()
    (run / "receipts" / "receipt_v1.txt").symlink_to(runs / "py_json" / "episodes.jsonl")
    (run / "analyses").mkdir()
    (run / "analyses" / "analysis_v2.json").symlink_to(run / "analyses" / "gone.json")
    corpus.rejects["links"] = {
        ("links/snapshots/skills_v1.json", None): "outside the run folder",
        ("links/snapshots/skills_v2.json", None): "symlink loop",
        ("links/snapshots/skills_v3.json", None): "outside the run folder",
        ("links/receipts/receipt_v1.txt", None): "outside the run folder",
        ("links/analyses/analysis_v2.json", None): "No such file",
    }

    run = runs / "odd_names"
    generate_run(run, SPEC, 23)
    snaps = run / "snapshots"
    body = (snaps / "skills_v1.json").read_bytes()
    for name in (
        "skills_v-1.json",
        "skills_v+2.json",
        "skills_v 4.json",
        "skills_v1_0.json",
        "skills_v\u0663.json",  # ARABIC-INDIC DIGIT THREE: int() reads it, the name is not ours
        "skills_v99999999999999999999.json",
    ):
        (snaps / name).write_bytes(body)
    corpus.ignored["odd_names"] = {
        "skills_v-1.json": "ASCII digits",
        "skills_v+2.json": "ASCII digits",
        "skills_v 4.json": "ASCII digits",
        "skills_v1_0.json": "ASCII digits",
        "skills_v\u0663.json": "ASCII digits",
        "skills_v99999999999999999999.json": "out of range",
    }

    run = runs / "bad_values"
    generate_run(run, SPEC, 24)
    lines = _episode_lines(run)
    hostile = {
        2: b'{"id": "bool", "skill_lib_version": true}',
        3: b'{"id": "str", "skill_lib_version": "1"}',
        4: b'{"id": "half", "skill_lib_version": 1.5}',
        5: b'{"id": "huge", "skill_lib_version": 9223372036854775808}',
        6: b"\x0b\x0c",
        7: b'{"id": "deep", "x": ' + b"[" * 600 + b"]" * 600 + b"}",
        8: b'{"id": "digits", "n": ' + b"7" * 4301 + b"}",
    }
    for number in sorted(hostile):
        lines.insert(number - 1, hostile[number])
    (run / "episodes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    deep = b'{"version": 1, "cards": [], "x": ' + b"[" * 600 + b"]" * 600 + b"}"
    (run / "snapshots" / "skills_v1.json").write_bytes(deep)
    corpus.rejects["bad_values"] = {
        ("bad_values/episodes.jsonl", 2): "skill_lib_version must be an integer, got True",
        ("bad_values/episodes.jsonl", 3): "skill_lib_version must be an integer, got '1'",
        ("bad_values/episodes.jsonl", 4): "skill_lib_version must be an integer, got 1.5",
        ("bad_values/episodes.jsonl", 5): "skill_lib_version out of range",
        ("bad_values/episodes.jsonl", 6): "not valid JSON",
        ("bad_values/episodes.jsonl", 7): "nested 601 levels deep",
        ("bad_values/episodes.jsonl", 8): "4300 digits",
        ("bad_values/snapshots/skills_v1.json", None): "nested 601 levels deep",
    }

    run = runs / "bad_arrays"
    generate_run(run, SPEC, 25)
    snaps = run / "snapshots"
    for k, bad in ((1, b"[1,,2]"), (2, b"[+1, 01]"), (3, b"[nan, any]")):
        text = (snaps / f"skills_v{k}.json").read_bytes()
        start = text.index(b'"_trigger_emb": [') + len(b'"_trigger_emb": ')
        end = text.index(b"]", start) + 1
        (snaps / f"skills_v{k}.json").write_bytes(text[:start] + bad + text[end:])
        corpus.rejects["bad_arrays"] = {
            **corpus.rejects.get("bad_arrays", {}),
            (f"bad_arrays/snapshots/skills_v{k}.json", None): "not a JSON object",
        }
    fuzz_finds(runs, corpus, 26)
    return corpus


def fuzz_finds(runs: Path, corpus: HostileCorpus, index: int) -> None:
    """What the differential fuzz found (each once failed a run or changed a state):

    ``fuzz_kept`` (the original writes every state): ``NaN`` and infinities in a library
    outside the embeddings, ``cards`` an empty object, one version spelled ``v0``/``v00``
    and ``v1``/``v01`` (the original keeps the last name it reads);
    ``fuzz_rejects``: a rejected line holding U+2028 and NEL, a library with a lone
    surrogate escape, a snapshot name that is not UTF-8 (listed, escaped in the report),
    a byte that is not UTF-8 in an embedding that is not an array, an integer past
    Python's digit limit in a member a duplicate key overwrites (both once kept unread).
    """
    import os

    run = runs / "fuzz_kept"
    generate_run(run, SPEC, index)
    snaps = run / "snapshots"
    text = (snaps / "skills_v1.json").read_bytes()
    text = text.replace(b'"harmful": 0', b'"harmful": -Infinity, "score": NaN', 1)
    (snaps / "skills_v1.json").write_bytes(text[:-1] + b', "big": 1e999}')
    lib = json.loads((snaps / "skills_v2.json").read_bytes())
    lib["cards"] = {}
    (snaps / "skills_v2.json").write_text(json.dumps(lib), encoding="utf-8")
    for k in (0, 1):
        lib = json.loads((snaps / f"skills_v{k}.json").read_bytes())
        lib["cards"] = lib["cards"][:1]
        (snaps / f"skills_v0{k}.json").write_text(json.dumps(lib), encoding="utf-8")
    corpus.seed_equal.append("fuzz_kept")

    run = runs / "fuzz_rejects"
    generate_run(run, SPEC, index + 1)
    lines = _episode_lines(run)
    lines.insert(1, '{"id": "x\u2028y", "skill_lib_version": \x85'.encode())
    (run / "episodes.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    snaps = run / "snapshots"
    text = (snaps / "skills_v2.json").read_bytes()
    (snaps / "skills_v2.json").write_bytes(text.replace(b'"c0', b'"\\ud800c0', 1))
    (snaps / os.fsdecode(b"skills_v\xff.json")).write_bytes(b"{}")
    # a byte that is not UTF-8 in a value the reader skips unbuilt (an embedding that is
    # not an array of numbers): the original's text-mode open() dies on it
    text = (snaps / "skills_v3.json").read_bytes()
    start = text.index(b'"_trigger_emb": [') + len(b'"_trigger_emb": ')
    end = text.index(b"]", start) + 1
    (snaps / "skills_v3.json").write_bytes(text[:start] + b'"\xff"' + text[end:])
    # an integer past Python's digit limit in a member a duplicate key overwrites
    text = (snaps / "skills_v1.json").read_bytes()
    text = text.replace(b'"card_id": ', b'"card_id": ' + b"7" * 4301 + b', "card_id": ', 1)
    (snaps / "skills_v1.json").write_bytes(text)
    corpus.rejects["fuzz_rejects"] = {
        ("fuzz_rejects/episodes.jsonl", 2): "not valid JSON",
        ("fuzz_rejects/snapshots/skills_v2.json", None): "not storable as UTF-8",
        ("fuzz_rejects/snapshots/skills_v3.json", None): "not UTF-8",
        ("fuzz_rejects/snapshots/skills_v1.json", None): "4300 digits",
    }
