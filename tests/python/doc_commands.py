"""The commands README.md and docs/ show, read out of their fenced blocks,
and a way to run them as written on this machine (test_docs.py).

A block's language says what it holds: `sh` and `bash` are commands to
type, `console` is a transcript (`$ ` starts a command, the lines up to the
next prompt are what it prints; `>>> ` starts Python, which is not run
here), and every other block (python, json, toml, text, promql...) is not a
command. A block with no language is refused: its reader cannot tell."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from conftest import REPO_ROOT, START_S, STOP_S, free_ports

COMMAND_LANGUAGES = {"sh", "bash", "console"}
OTHER_LANGUAGES = {"python", "json", "toml", "yaml", "text", "promql", "jinja"}
FENCE = re.compile(r"^( *)```(\S*)\s*$")
# The ports and broker the docs use, which the tests replace with free ones.
DOC_PORTS = (8000, 8001, 8002, 9000, 9092)


def documents() -> list[str]:
    return ["README.md", *sorted(f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence
    language: str
    lines: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    text: str  # as written, continuation lines and all
    shown: str  # what a console transcript shows it printing

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0]


def blocks(doc: str) -> list[Block]:
    found, lines = [], (REPO_ROOT / doc).read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, language, start, body = len(m.group(1)), m.group(2), i + 1, []
        i += 1
        while not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:])
            i += 1
        found.append(Block(doc, start, language, tuple(body)))
        i += 1
    return found


def complete(text: str) -> bool:
    """Whether `text` is a whole shell command: no trailing backslash, no
    quote left open."""
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def commands(block: Block) -> list[Command]:
    """A command block's commands, each over as many lines as it takes,
    with what a transcript shows after it."""
    out: list[Command] = []
    pending: list[str] = []
    start = 0
    shown: list[str] = []
    in_python = False

    def finish_shown():
        if out and shown:
            last = out[-1]
            out[-1] = Command(last.doc, last.line, last.text, "\n".join(shown))
        shown.clear()

    for offset, line in enumerate(block.lines, start=block.line + 1):
        if pending:
            pending.append(line)
        elif block.language == "console":
            if line.startswith("$ "):
                finish_shown()
                in_python = False
                pending, start = [line[2:]], offset
            elif line.startswith(">>> "):
                finish_shown()
                in_python = True
            elif not in_python:
                shown.append(line)
        elif line.strip() and not line.lstrip().startswith("#"):
            pending, start = [line], offset
        if pending and complete("\n".join(pending)):
            out.append(Command(block.doc, start, "\n".join(pending), ""))
            pending = []
    finish_shown()
    assert not pending, f"{block.doc}:{start}: an unfinished command"
    return out


def all_commands() -> list[Command]:
    return [c for doc in documents() for b in blocks(doc)
            if b.language in COMMAND_LANGUAGES for c in commands(b)]


SHOWN = re.compile(r"(?P<any>\s*\.\.\.\s*)|(?P<space>\s+)"
                   r"|(?P<rate>\d+(?:\.\d+)?(?= (?:s|records/s)\b))|(?P<char>.)", re.S)


def shown_pattern(shown: str) -> re.Pattern:
    """What a transcript shows, as a pattern for what the command prints:
    `...` stands for anything, white space for any (a JSON answer wrapped
    over lines, `ls` in columns), and times and rates for whatever they
    are."""
    parts = {"any": ".*?", "space": r"\s*", "rate": r"[0-9.]+"}
    return re.compile("".join(parts.get(m.lastgroup) or re.escape(m.group())
                              for m in SHOWN.finditer(shown.strip())), re.S)


@dataclass
class Shell:
    """Runs documented commands in `cwd` with `nereid` on the PATH, the
    docs' ports replaced with free ones and the paths in `paths` (scratch
    paths such as /tmp/traffic) with this run's own."""

    cwd: Path
    tmp: Path
    paths: dict[str, str]
    ports: dict[int, int]
    binary: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, tmp: Path, cwd: Path = REPO_ROOT, paths: dict[str, str] | None = None) -> Shell:
        binary = Path(os.environ.get("NEREID_BIN", REPO_ROOT / "target/debug/nereid")).resolve()
        (tmp / "bin").mkdir(exist_ok=True)
        (tmp / "bin/nereid").symlink_to(binary)
        ports = dict(zip(DOC_PORTS, free_ports(len(DOC_PORTS))))
        return cls(cwd, tmp, dict(paths or {}), ports, binary)

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.extra_env,
                "PATH": f"{self.tmp / 'bin'}:{REPO_ROOT / '.venv/bin'}:{os.environ['PATH']}"}

    def local(self, text: str) -> str:
        """The command with this run's ports and paths."""
        for old, new in self.paths.items():
            text = re.sub(rf"(?<![\w/.]){re.escape(old)}\b", new, text)
        return re.sub(r"\b(" + "|".join(map(str, DOC_PORTS)) + r")\b",
                      lambda m: str(self.ports[int(m.group(1))]), text)

    def run(self, command: Command, timeout: float = 120) -> subprocess.CompletedProcess:
        done = subprocess.run(["bash", "-c", self.local(command.text)], cwd=self.cwd,
                              env=self.env(), capture_output=True, text=True, timeout=timeout)
        if command.shown:
            assert shown_pattern(command.shown).fullmatch(done.stdout.strip()), \
                f"{command.doc}:{command.line}: shows\n{command.shown}\nbut printed\n{done.stdout}{done.stderr}"
        return done

    def transcript(self, block: Block, timeout: float = 300) -> list[str]:
        """Runs a console block's commands in one shell, as a terminal
        would (`echo $?` sees the command before it), and checks that each
        prints what the block shows (standard error too, as a terminal
        shows it). Returns what each printed."""
        marker = "@@nereid-doc-command-done@@"
        script = "".join(f"{self.local(c.text)}\n__status=$?; echo {marker}; (exit $__status)\n"
                         for c in commands(block))
        done = subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)
        printed = done.stdout.split(marker + "\n")
        for command, out in zip(commands(block), printed):
            if command.shown:
                assert shown_pattern(command.shown).fullmatch(out.strip()), \
                    f"{command.doc}:{command.line}: shows\n{command.shown}\nbut printed\n{out}"
        return printed[:-1]

    def ok(self, command: Command, timeout: float = 120) -> str:
        done = self.run(command, timeout)
        assert done.returncode == 0, \
            f"{command.doc}:{command.line}: `{command.text}` exited {done.returncode}:\n{done.stdout}{done.stderr}"
        return done.stdout

    def serve(self, command: Command) -> Served:
        """Starts a documented server: `nereid ...`, or `make run ...` as
        what `make --dry-run` says it would run, on the tests' debug build
        of the same features (a release build takes minutes on two cores).
        Either on this run's ports."""
        words = shlex.split(self.local(command.text), comments=True)
        if words[0] == "nereid":
            args, cwd = words[1:], self.cwd
        else:
            assert words[:2] == ["make", "run"], command
            args, cwd = self.make_run(words), REPO_ROOT
        for flag, port in (("--http-port", 8000), ("--grpc-port", 8001), ("--metrics-port", 8002)):
            if flag not in args and not any(a.startswith(flag + "=") for a in args):
                args.append(f"{flag}={self.ports[port]}")
        log = self.tmp / f"nereid-{len(list(self.tmp.glob('nereid-*.log')))}.log"
        process = subprocess.Popen([str(self.binary), *args], cwd=cwd, env=self.env(),
                                   stdout=open(log, "w"), stderr=subprocess.STDOUT)
        served = Served(process, log, args)
        served.wait_ready(self.http_port(args))
        return served

    def make_run(self, words: list[str]) -> list[str]:
        """The server arguments `make run` would start the release build
        with, checking that it would build the features the words ask for."""
        # As a user's shell runs it: not as a sub-make of `make test`, whose
        # MAKEFLAGS and MAKELEVEL would add "Entering directory" lines.
        env = {k: v for k, v in self.env().items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        plan = subprocess.run(["make", "--dry-run", *words[1:]], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, check=True).stdout
        lines = plan.replace("\\\n\t", "").strip().splitlines()
        build = next(line for line in lines if line.startswith("cargo build --release"))
        assert ("--features nereid-server/torch" in build) == ("TORCH=1" in words), build
        server = lines[-1]
        assert "target/release/nereid " in server, plan
        return shlex.split(server.split("target/release/nereid", 1)[1])

    def http_port(self, args: list[str]) -> int:
        for i, a in enumerate(args):
            if a == "--http-port":
                return int(args[i + 1])
            if a.startswith("--http-port="):
                return int(a.split("=", 1)[1])
        raise AssertionError(args)


@dataclass
class Served:
    process: subprocess.Popen
    log_path: Path
    args: list[str]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, port: int) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"{self.args} exited:\n{self.log()}"
            try:
                if requests.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=10).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise AssertionError(f"not ready in {START_S} s:\n{self.log()}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            assert self.process.wait(timeout=STOP_S) == 0, self.log()
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
