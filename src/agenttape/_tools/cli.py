"""The ``agenttape`` command: look into cassettes (in the terminal or as one HTML page), compare
runs, convert, clean and audit them, run any program under a cassette (or serve one through the
recording proxy), and find the runs a Recorder kept.

Exit status: 0 success; 1 the answer is "yes, there is something" (``diff``: the runs differ,
``audit``: a secret was found); 2 bad usage or an input that cannot be read, always with one
line saying why and never a traceback. Tables use rich when it is installed and the output is a
terminal (``pip install 'agenttape-recorder[cli]'``), plain aligned text otherwise, so pipes and CI logs
get stable text either way.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .._core.errors import AgentTapeError, CassetteNotFoundError
from .._core.files import read, write_atomic
from .._core.options import MODE_METAVAR, Mode, environment_mode, mode_argument
from .._core.text import counted
from .._core.wire import codec
from .._version import __version__
from . import (
    doctor,
    faults_command,
    git_setup,
    review,
    runs_actions,
    store_commands,
    textconv,
    verdict,
)
from .cli_usage import (
    JSON,
    PROG,
    Handler,
    Parser,
    UsageError,
    arg,
    command,
    flag,
    operands,
    repeated,
)
from .reading import reading

# -- show --------------------------------------------------------------------------------------


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    from .show import OutOfRange, show

    try:
        show(args.cassette, args.index, args.json, out)
    except OutOfRange as exc:
        raise UsageError(str(exc)) from None
    return 0


# -- diff --------------------------------------------------------------------------------------


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    from .._core.jsonpath import parse
    from .diff import compare

    if args.verdict or args.fail_on:
        return verdict.cmd_verdict(args, out)
    for path in args.ignore:
        try:
            parse(path)
        except ValueError as exc:
            raise UsageError(f"--ignore {exc}") from None
    _, a = read(args.a)
    _, b = read(args.b)
    with reading(os.path.getsize(args.a), os.path.getsize(args.b)):
        pairs = compare(a, b, args.ignore)
    out.write(f"A {args.a} ({len(a)} interactions)\nB {args.b} ({len(b)} interactions)\n")
    out.write("each line reads: expected <A>, got <B>\n")
    differing = 0
    for pair in pairs:
        if pair.differences:
            differing += 1
            out.write(f"{pair.label}\n")
            out.write("".join(f"    {line}\n" for line in pair.differences))
        elif args.all:
            out.write(f"{pair.label}: same\n")
    if differing:
        out.write(f"{differing} of {counted(len(pairs), 'interaction')} differ\n")
        return 1
    out.write(f"no differences in {counted(len(pairs), 'interaction')}\n")
    return 0


# -- export / import-vcr -----------------------------------------------------------------------


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    from .export import dumps, to_har, to_json

    if args.endpoint and args.format != "otlp":
        raise UsageError("--endpoint goes with --format otlp")
    header, interactions = read(args.cassette)
    with reading(os.path.getsize(args.cassette)):
        if args.format == "otlp":
            from .otlp import to_otlp

            document = to_otlp(header, interactions)
        elif args.format == "har":
            document = to_har(header, interactions, os.path.basename(args.cassette))
        else:
            document = to_json(header, interactions)
    if args.endpoint:
        from .otlp import send

        url = send(document, args.endpoint)
        sys.stderr.write(f"sent {counted(len(interactions) + 1, 'span')} to {url}\n")
        return 0
    text = dumps(document, indent=2, ensure_ascii=False) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        sys.stderr.write(f"wrote {args.output}\n")
    else:
        out.write(text)
    return 0


def cmd_import_vcr(args: argparse.Namespace, out: TextIO) -> int:
    from .._core import meta
    from .vcr import load_serializer, read_vcr

    serializer = load_serializer(args.serializer) if args.serializer else None
    interactions, decoded = read_vcr(args.source, serializer)
    target = Path(args.output)
    if target.exists() and not args.force:
        raise UsageError(f"{target} exists; pass --force to overwrite it")
    header = meta.new_header()
    header["imported_from"] = {"format": "vcrpy", "path": os.path.basename(args.source)}
    write_atomic(target, codec.encode_pieces(header, interactions))
    out.write(
        f"converted {counted(len(interactions), 'interaction')} from {args.source} to {target}\n"
    )
    if decoded:
        out.write(
            f"note: vcrpy had stored {decoded} compressed response body(ies) already "
            "decompressed; their Content-Encoding header was dropped so clients read them as is\n"
        )
    return 0


# -- redact ------------------------------------------------------------------------------------


def cmd_redact(args: argparse.Namespace, out: TextIO) -> int:
    from .._core.redaction import Redactor
    from .redact import BodyTooLarge, redact

    rules = [f"header:{h}" for h in args.header]
    rules += [f"query:{q}" for q in args.query]
    rules += [f"json:{p}" for p in args.json_path]
    rules += [f"regex:{r}" for r in args.regex]
    try:
        redactor = Redactor.from_rules(rules)
    except ValueError as exc:
        raise UsageError(f"{exc}") from None
    header, interactions = read(args.cassette)
    changed = 0
    for index, interaction in enumerate(interactions):
        try:
            changed += redact(index, interaction, redactor)
        except BodyTooLarge as exc:
            raise AgentTapeError(f"{args.cassette}: {exc}") from None
    if changed:
        # Through a symbolic link, the file it points to is rewritten (and keeps its mode).
        write_atomic(Path(args.cassette), codec.encode_pieces(header, interactions))
        out.write(
            f"redacted {changed} of {counted(len(interactions), 'interaction')} in {args.cassette}\n"
        )
    else:
        out.write(
            f"nothing to redact in {args.cassette} ({counted(len(interactions), 'interaction')})\n"
        )
    return 0


# -- audit -------------------------------------------------------------------------------------


def _cassette_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files += sorted(p for p in path.rglob("*.msgpack") if p.is_file())
        elif path.exists():
            files.append(path)
        else:
            raise CassetteNotFoundError(f"cassette {name} does not exist")
    return files


def cmd_audit(args: argparse.Namespace, out: TextIO) -> int:
    from .audit import TOO_LARGE, audit

    files = _cassette_files(args.paths)
    found, unscanned, unreadable = 0, 0, 0
    for file in files:
        try:
            header, interactions = read(file)
        except AgentTapeError as exc:
            unreadable += 1
            sys.stderr.write(f"{PROG} audit: error: {exc}\n")
            continue
        for finding in audit(header, interactions, file.stat().st_size):
            if finding.kind == TOO_LARGE:
                unscanned += 1
            else:
                found += 1
            out.write(f"{file}: {finding.describe()}\n")
    read_files = len(files) - unreadable
    summary = f"{counted(found, 'secret')} found in {counted(read_files, 'cassette')}"
    if unscanned:
        summary += (
            f"; {counted(unscanned, 'body', 'bodies')} too large to scan in full "
            "(decompression bombs?), not proven clean"
        )
    if unreadable:
        summary += f"; {unreadable} could not be read"
    if found:
        summary += "; remove them with 'agenttape redact' (or re-record with redact= rules)"
    (sys.stderr if found or unscanned or unreadable else out).write(summary + "\n")
    if unreadable:
        return 2
    return 1 if found or unscanned else 0


# -- run ---------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from . import run_command

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("give the command after '--', e.g. agenttape run -- python app.py")
    mode = args.mode or _environment_mode() or "none"
    cassette = Path(args.cassette) if args.cassette else run_command.default_cassette(command)
    options = run_command.RunOptions(routes=_routes(args.route), faults=_faults(args.fault))

    def report(message: str) -> None:
        sys.stderr.write(f"{PROG} run: {message}\n")
        sys.stderr.flush()

    return run_command.run(command, cassette, mode, report, options)


def _environment_mode() -> Mode | None:
    try:
        return environment_mode()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _routes(routes: list[str]) -> dict[Any, Any]:
    from .proxy_command import parse_routes

    try:
        return parse_routes(routes)
    except ValueError as exc:
        raise UsageError(f"{exc}") from None


def _faults(texts: list[str]) -> list[Any]:
    from .._core.faults.spec import FaultSpecError, parse_fault

    try:
        return [parse_fault(text) for text in texts]
    except FaultSpecError as exc:
        raise UsageError(f"--fault: {exc}") from None


# -- proxy -------------------------------------------------------------------------------------


def cmd_proxy(args: argparse.Namespace, out: TextIO) -> int:
    from . import proxy_command

    if args.print_ca:
        return proxy_command.print_ca(out)
    mode = args.mode or _environment_mode() or "none"
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port (0 to 65535; 0 picks a free one)")
    if args.upstream:
        from .._proxy.upstream import origin_of

        try:
            origin_of(args.upstream)
        except ValueError as exc:
            raise UsageError(f"--upstream {exc}") from None
    return proxy_command.serve(
        Path(args.cassette),
        mode,
        port=args.port,
        upstream=args.upstream,
        routes=_routes(args.route),
        faults=_faults(args.fault),
        out=out,
        err=sys.stderr,
    )


# -- view --------------------------------------------------------------------------------------


def cmd_view(args: argparse.Namespace, out: TextIO) -> int:
    import tempfile
    import webbrowser

    from .view import build_page, write_page

    cassette = Path(args.cassette)
    if args.output and Path(args.output).resolve() == cassette.resolve():
        raise UsageError(f"-o {args.output} is the cassette itself; name an .html file")
    header, interactions = read(cassette)
    page = build_page(header, interactions, cassette.name)
    what = f"{counted(len(interactions), 'interaction')}, {len(page.encode()):,} bytes"
    if args.output:
        write_page(Path(args.output), page)
        out.write(f"wrote {args.output} ({what})\n")
        return 0
    descriptor, name = tempfile.mkstemp(prefix=f"agenttape-view-{cassette.stem}-", suffix=".html")
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(page)
    out.write(f"wrote {name} ({what})\n")
    out.flush()
    if not webbrowser.open(Path(name).as_uri()):
        sys.stderr.write(f"{PROG} view: no browser to open it here; open {name} yourself\n")
    return 0


# -- parser ------------------------------------------------------------------------------------


MODE_AND_ROUTES = (
    arg(
        "--mode",
        type=mode_argument,
        metavar=MODE_METAVAR,
        help="default: $AGENTTAPE_MODE, else none (replay only); record is all",
    ),
    repeated(
        "--route",
        "FROM=TO",
        "while recording, send live traffic for FROM to TO instead (a local stand-in); "
        "the cassette keeps FROM. e.g. https://api.openai.com=http://127.0.0.1:8765 "
        "(repeatable)",
    ),
    repeated(
        "--fault",
        "SPEC",
        "inject a failure: [METHOD] PATTERN[#N]=KIND[:NAME=VALUE,...], e.g. "
        "'POST api.openai.com/v1/chat/completions#2=rate_limit:retry_after=30' "
        "(repeatable; see agenttape faults CASSETTE)",
    ),
)
"""The options ``run`` and ``proxy`` share: the mode, where live traffic goes, and the faults
to inject."""

(CASSETTE,) = operands("cassette")

COMMANDS = (
    command(
        "show",
        cmd_show,
        CASSETTE,
        arg(
            "-i",
            "--index",
            type=int,
            metavar="N",
            help="show interaction N (negative counts from the end) with headers and readable bodies",
        ),
        JSON,
        help="table of a cassette's interactions, or one in full",
    ),
    command(
        "diff",
        cmd_diff,
        *operands("a", "b"),
        repeated(
            "--ignore",
            "JSON_PATH",
            "leave a JSON path out of body comparisons (repeatable), e.g. id or "
            "choices[*].message.refusal",
        ),
        flag("--all", "also list the interactions that are the same"),
        *verdict.OPTIONS,
        help="compare two runs interaction by interaction (exit 1 when they differ)",
    ),
    command(
        "export",
        cmd_export,
        arg("cassette", metavar="CASSETTE", help="a cassette or a kept run"),
        arg("--format", choices=("json", "har", "otlp"), default="json"),
        arg("-o", "--output", metavar="FILE", help="write here instead of standard output"),
        arg(
            "--endpoint",
            metavar="URL",
            help="with --format otlp: send the trace to this OTLP/HTTP receiver "
            "(http://127.0.0.1:4318, as a collector, Jaeger or Phoenix listens) instead",
        ),
        help="JSON for reading, HAR 1.2 for devtools and HAR viewers, or OpenTelemetry spans",
    ),
    command(
        "import-vcr",
        cmd_import_vcr,
        arg("source", metavar="VCR.yaml"),
        arg("output", metavar="OUT.msgpack"),
        flag("--force", "overwrite OUT.msgpack if it exists"),
        arg(
            "--serializer",
            metavar="MODULE:ATTRIBUTE",
            help="the project's own vcrpy serializer (the one its conftest registers)",
        ),
        help="convert a vcrpy cassette (YAML, or JSON by .json name)",
    ),
    command(
        "redact",
        cmd_redact,
        CASSETTE,
        *(
            repeated(name, metavar, f"{what} (repeatable)")
            for name, metavar, what in (
                ("--header", "H", "header name to redact"),
                ("--query", "Q", "query parameter to redact"),
                ("--json-path", "P", "JSON path in request and response bodies, e.g. user.email"),
                ("--regex", "R", "regular expression to redact in URLs, headers and bodies"),
            )
        ),
        help="redact secrets in place, atomically (the default rules always apply)",
        description=(
            "Redact CASSETTE in place, atomically. The default rules always apply: secret "
            "headers and query parameters, and credential-shaped values in URLs, headers "
            "and bodies, response bodies included (compressed ones are decompressed, "
            "redacted and compressed again)."
        ),
    ),
    command(
        "audit",
        cmd_audit,
        arg(
            "paths",
            nargs="+",
            metavar="PATH",
            help="cassette files or directories (searched for *.msgpack)",
        ),
        help="scan cassettes for secrets; exit 1 when one is found",
    ),
    command(
        "run",
        cmd_run,
        arg("--cassette", metavar="P", help="default: cassettes/<script name>.msgpack"),
        *MODE_AND_ROUTES,
        arg("command", nargs=argparse.REMAINDER, metavar="-- COMMAND..."),
        help="run any program (Python, Node, curl, ...) and its subprocesses under a cassette",
        description=(
            "Run COMMAND with every process it starts recording to or replaying from one "
            "cassette, with no change to its code: Python processes in-process, every "
            "other program through the recording proxy (HTTPS_PROXY, with the agenttape "
            "CA trusted). A bare 'python' means this interpreter. Exits with the "
            "command's status, or 1 when it succeeded but a request through the proxy had "
            "no recorded interaction."
        ),
    ),
    command(
        "view",
        cmd_view,
        CASSETTE,
        arg(
            "-o",
            "--output",
            metavar="FILE.html",
            help="write the page here (atomically) and open no browser",
        ),
        help="one self-contained HTML page: timeline, decoded bodies, replay kit",
        description=(
            "Lay out CASSETTE as one HTML page that works offline: a waterfall of the "
            "interactions (boundaries, errors, 429s and streams cut short marked), each "
            "one's request and response decoded for reading, and the replay kit. Without "
            "-o the page goes to a temporary file opened in the browser."
        ),
    ),
    command(
        "proxy",
        cmd_proxy,
        arg(
            "--cassette",
            metavar="P",
            default="cassettes/proxy.msgpack",
            help="default: %(default)s",
        ),
        *MODE_AND_ROUTES,
        arg(
            "--port",
            type=int,
            default=0,
            metavar="N",
            help="default: a free port, printed at start",
        ),
        arg(
            "--upstream",
            metavar="URL",
            help="base-URL mode: requests that name no host go to URL "
            "(point OPENAI_BASE_URL and the like at the proxy)",
        ),
        flag(
            "--print-ca",
            "print the path of the agenttape CA certificate (made if need be) and exit",
        ),
        help="the recording proxy on its own, for programs started elsewhere",
        description=(
            "Serve a cassette to any program through a proxy on 127.0.0.1: as a forward "
            "proxy (HTTPS_PROXY/HTTP_PROXY; HTTPS is opened with a certificate from the "
            "agenttape CA, which the program must trust) and, with --upstream, at a base "
            "URL. Runs until Ctrl-C, then saves. A request nothing recorded serves is "
            "answered with status 599."
        ),
    ),
    *store_commands.STORE_COMMANDS,
    *doctor.COMMANDS,
    *textconv.COMMANDS,
    *git_setup.COMMANDS,
    *review.COMMANDS,
    *faults_command.COMMANDS,
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="Record every HTTP exchange an AI agent makes, byte-exact, and replay it offline.",
    )
    parser.add_argument("--version", action="version", version=f"agenttape {__version__}")
    commands = parser.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=Parser)
    for each in COMMANDS:
        each.declare(commands)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if runs_actions.is_action(words):
        parser = runs_actions.build_parser()
    prog = PROG
    try:
        args, unknown = parser.parse_known_args(words)
        if args.command_name:
            prog = f"{PROG} {args.command_name}"
        if unknown:
            raise UsageError(f"unrecognized arguments: {' '.join(unknown)} (see '{prog} --help')")
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            raise UsageError(
                "give a command: show, view, diff, export, import-vcr, redact, audit, run, "
                "proxy, faults, runs, index, fetch, doctor, textconv, init-git or rerecord "
                f"(see '{PROG} --help')"
            )
        return handler(args, stream)
    except UsageError as exc:
        sys.stderr.write(f"{exc.prog or prog}: error: {exc}\n")
        return 2
    except BrokenPipeError:
        # The reader went away (``agenttape show x | head``): not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except AgentTapeError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return 2
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        sys.stderr.write(f"{prog}: error: {exc.strerror or exc}{where}\n")
        return 2
    except KeyboardInterrupt:
        return 130
