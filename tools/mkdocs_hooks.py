"""MkDocs hooks (mkdocs.yml ``hooks:``) and ``make docs-generated``: the pages' generated parts.

Two markers, each alone on a line of a page under docs/, each closed by ``<!-- end: NAME -->``:

- ``<!-- generated: settings -->`` and ``<!-- generated: command-line -->``: the settings
  table, from ``core/config.Settings`` and the ``StatepoolSettings`` resource, and the
  ``statepool`` command's reference, from its own argparse parser. Nothing to keep in step.
- ``<!-- generated: layout -->``: the package tree, each module with the first line of its
  docstring, folders in the data's order (:data:`LAYOUT_ORDER`), read from the source files.
- ``<!-- include: performance/reference.md -->``: that file of docs/. A missing file fails;
  a glob (``performance/*-baseline-*.md``) includes every match in name order, or nothing.

What stands between a marker and its end is generated and committed, so the page reads
whole on the repository too; ``python -m tools.mkdocs_hooks`` writes it again (``--check``:
exit 1 naming the pages that are not current; the docs tests run it), and the site build
fills it afresh. Text a table cell prints is escaped (``<store>`` is no HTML tag).
"""

from __future__ import annotations

import argparse
import ast
import html
import re
import sys
import textwrap
from pathlib import Path

MARKER = re.compile(r"^<!--\s*(generated|include):\s*(\S+)\s*-->[ \t]*$")
END = re.compile(r"^<!--\s*end:\s*(\S+)\s*-->[ \t]*$")
DOCS = Path(__file__).resolve().parent.parent / "docs"


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Each marked part of ``page`` generated afresh; the markers themselves left out."""
    text = filled(markdown, Path(config["docs_dir"]), page.file.src_path)
    return "\n".join(
        line for line in text.split("\n") if not (MARKER.match(line) or END.match(line))
    )


def filled(markdown: str, docs: Path = DOCS, where: str = "") -> str:
    """``markdown`` with what stands between each marker and its end generated again."""
    lines, out, i = markdown.split("\n"), [], 0
    while i < len(lines):
        match = MARKER.match(lines[i])
        out.append(lines[i])
        i += 1
        if not match:
            continue
        kind, name = match.groups()
        end = next((j for j in range(i, len(lines)) if END.match(lines[j])), None)
        if end is not None and END.match(lines[end]).group(1) == name:
            i = end + 1  # the part generated last time, replaced
        out += ["", _generate(kind, name, docs, where), "", f"<!-- end: {name} -->"]
    return "\n".join(out)


def _generate(kind: str, name: str, docs: Path, where: str) -> str:
    if kind == "include":
        return _include(docs, name, where)
    if name not in GENERATORS:
        raise KeyError(f"{where}: no generator {name!r} ({sorted(GENERATORS)})")
    return GENERATORS[name]()


def stale_pages(docs: Path = DOCS, write: bool = False) -> list[Path]:
    """The pages under ``docs`` whose generated parts are not current (written, if ``write``)."""
    stale = []
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        if not any(MARKER.match(line) for line in text.split("\n")):
            continue
        fresh = filled(text, docs, page.relative_to(docs).as_posix())
        if fresh != text:
            stale.append(page)
            if write:
                page.write_text(fresh, encoding="utf-8")
    return stale


def _include(docs: Path, name: str, where: str) -> str:
    """The text of ``name`` under docs/; a glob includes every match in name order (or none)."""
    if any(c in name for c in "*?["):
        paths = sorted(docs.glob(name))
    else:
        paths = [docs / name]
        if not paths[0].is_file():
            raise FileNotFoundError(f"{where}: {name} is not in {docs}")
    return "\n\n".join(_demoted(path.read_text(encoding="utf-8").strip()) for path in paths)


def _demoted(text: str) -> str:
    """Headings two levels down, so an included page's title sits under the section's."""
    lines, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        lines.append("##" + line if not fenced and re.match(r"#{1,4} ", line) else line)
    return "\n".join(lines)


def _cell(text: object) -> str:
    """A table cell: one line, ``|`` escaped, and outside code spans ``&``, ``<`` and ``>``
    too (``<store>/feedback`` would otherwise be an HTML tag, and vanish)."""
    parts = str(text).replace("|", "\\|").replace("\n", " ").split("`")
    return "`".join(html.escape(p, quote=False) if i % 2 == 0 else p for i, p in enumerate(parts))


def _default(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def settings_table() -> str:
    """One row per setting: its variable, default, whether a run's config can set it."""
    from statepool_dagster.core.config import Settings
    from statepool_dagster.definitions import DEFINITION_SETTINGS
    from statepool_dagster.defs.resources import StatepoolSettings

    # The ones the definitions hold are read when the code location loads, not per run.
    per_run = set(StatepoolSettings.model_fields) - set(DEFINITION_SETTINGS)
    rows = [
        "| variable | default | per run (launchpad) | meaning |",
        "|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        rows.append(
            f"| `{Settings.env_name(name)}` | {_default(field.default)} "
            f"| {'yes' if name in per_run else ''} | {_cell(field.description or '')} |"
        )
    return "\n".join(rows)


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.dest.upper()}`"
    names = ", ".join(f"`{s}`" for s in action.option_strings)
    if action.choices:
        return f"{names} `{{{','.join(map(str, action.choices))}}}`"
    if action.nargs == 0:
        return names
    return f"{names} `{action.metavar or action.dest.upper()}`"


def _usage(command: argparse.ArgumentParser) -> str:
    """The usage line, wrapped at a fixed width (not the terminal's) so builds agree."""
    formatter = argparse.HelpFormatter(command.prog, width=88)
    formatter.add_usage(command.usage, command._actions, command._mutually_exclusive_groups, "")
    return formatter.format_help().strip()


def command_line_reference() -> str:
    """A section per ``statepool`` sub-command: its help, usage and options."""
    from statepool_dagster.cli.main import build_parser

    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    out: list[str] = []
    for name, command in sub.choices.items():
        usage = _usage(command)
        out += [f"## statepool {name}", "", _cell(helps.get(name) or ""), "", "```text", usage]
        out += ["```", "", "| option | required | default | meaning |", "|---|---|---|---|"]
        for action in command._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            default = "" if action.default in (None, False) else _default(action.default)
            required = "yes" if action.required else ""
            meaning = _cell(action.help or "")
            out.append(f"| {_flags(action)} | {required} | {default} | {meaning} |")
        out.append("")
    return "\n".join(out).rstrip()


PACKAGE = Path(__file__).resolve().parent.parent / "statepool_dagster"
# Folders first, in this order (the data's order in core/ and defs/); any other folder after them by
# name, then the modules by name. A folder's line is its __init__'s docstring.
LAYOUT_ORDER = {
    "": ["core", "defs", "storages", "cli", "live", "trainers", "demo"],
    "defs": ["runs", "sessions", "feedback", "exports"],
    "core": [
        "runs",
        "stages",
        "states",
        "prompts",
        "store",
        "segments",
        "sessions",
        "feedback",
        "export",
        "report",
        "rewards",
    ],
}
# What a folder holds, where its __init__'s docstring only gives its name.
NAME_WIDTH = 22  # the description column of the tree
LINE_WIDTH = 112


def docstring_line(path: Path) -> str:
    """The first line of a module's docstring, "…" where its first paragraph goes on."""
    doc = (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "").strip()
    first, _, rest = doc.partition("\n")
    line = first.strip().replace("``", "")
    return line + (" …" if rest and not rest.startswith("\n") else "")


def _entries(folder: Path, rel: str) -> list[Path]:
    order = LAYOUT_ORDER.get(rel, [])
    subs = [p for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    subs.sort(key=lambda p: (order.index(p.name) if p.name in order else len(order), p.name))
    modules = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
    return [*subs, *modules]


def layout_lines(folder: Path = PACKAGE, rel: str = "", depth: int = 1) -> list[str]:
    """The tree under ``folder``: one line per folder and module, with its docstring line."""
    lines = []
    for entry in _entries(folder, rel):
        name = entry.name + ("/" if entry.is_dir() else "")
        source = entry / "__init__.py" if entry.is_dir() else entry
        lead = f"{'  ' * depth}{name}"
        lead = lead.ljust(NAME_WIDTH) if len(lead) < NAME_WIDTH else lead + "  "
        wrapped = textwrap.wrap(
            docstring_line(source), LINE_WIDTH - len(lead), break_on_hyphens=False
        ) or [""]
        lines.append((lead + wrapped[0]).rstrip())
        lines += [" " * len(lead) + more for more in wrapped[1:]]
        if entry.is_dir():
            lines += layout_lines(entry, f"{rel}/{entry.name}".strip("/"), depth + 1)
    return lines


def package_layout() -> str:
    """The package tree as a fenced block (no language: never run)."""
    return "\n".join(["```", f"{PACKAGE.name}/", *layout_lines(), "```"])


GENERATORS = {
    "settings": settings_table,
    "command-line": command_line_reference,
    "layout": package_layout,
}


def main(argv: list[str]) -> int:
    """Write the generated parts of docs/ again; ``--check``: only name the stale pages."""
    check = "--check" in argv
    stale = stale_pages(write=not check)
    for page in stale:
        state = "not current" if check else "written"
        print(f"{page.relative_to(DOCS.parent)}: generated parts {state}", file=sys.stderr)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
