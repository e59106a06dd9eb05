"""MkDocs hook: a page shows a benchmark's results file (``<!-- bench/RESULTS.md -->`` on the
benchmark page, ``<!-- bench/RUN_INDEX.md -->`` on the run index's) as the benchmark last wrote
it, with the files it links to; a checkout without the file says so instead of failing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

MARKER = re.compile(r"<!-- bench/([A-Z_]+\.md) -->")
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
MISSING = (
    '!!! note "No results in this checkout"\n'
    "    This build found no `bench/{name}`. Run the benchmark in `bench/` that writes it,\n"
    "    then build the documentation again.\n"
)


def _bench(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent / "bench"


def _local(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target)


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    """Files RESULTS.md links to (its chart) are published beside the page."""
    bench = _bench(config)
    results = bench / "RESULTS.md"
    if results.is_file():
        for _, _, target in LINK.findall(results.read_text(encoding="utf-8")):
            source = bench / target
            if _local(target) and source.is_file() and source.suffix != ".md":
                files.append(File.generated(config, f"bench/{target}", abs_src_path=str(source)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files, **kwargs: Any) -> str:
    def include(marker: re.Match[str]) -> str:
        name = marker.group(1)
        results = _bench(config) / name
        if not results.is_file():
            return MISSING.format(name=name)
        text = re.sub(r"\A# [^\n]*\n", "", results.read_text(encoding="utf-8"))
        return LINK.sub(link, text)

    def link(match: re.Match[str]) -> str:
        image, label, target = match.groups()
        if not _local(target):
            return match.group(0)
        if files.get_file_from_path(f"bench/{target}") is not None:
            return f"{image}[{label}](bench/{target})"
        return f"`{label}`"

    return MARKER.sub(include, markdown)
