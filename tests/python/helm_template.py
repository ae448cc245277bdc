"""Renders deploy/helm/nereid the way `helm template` would, for the tests:
Helm is not installed here, so this covers exactly the part of Go's
text/template and Helm's functions that the chart's templates use (if, else,
with, range, define, include, pipelines, quote, default, toYaml, nindent,
indent, trunc, trimSuffix, not, .Files.Get, .Values, .Release, .Chart).
Anything else raises, so that a template that outgrows it fails loudly
instead of rendering wrongly."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)


class TemplateError(Exception):
    pass


@dataclass
class Node:
    kind: str  # text, output, if, with, range, define
    value: Any = None
    body: list = field(default_factory=list)
    other: list = field(default_factory=list)  # the else branch


def tokens(text: str) -> list[tuple[str, str]]:
    """("text", s) and ("action", s) in order, with Go's trim markers
    applied to the text beside them."""
    out: list[tuple[str, str]] = []
    position = 0
    trim_next = False
    for m in ACTION.finditer(text):
        chunk = text[position:m.start()]
        if trim_next:
            chunk = chunk.lstrip()
        if m.group(1):
            chunk = chunk.rstrip()
        out.append(("text", chunk))
        out.append(("action", m.group(2).strip()))
        trim_next = bool(m.group(3))
        position = m.end()
    tail = text[position:]
    out.append(("text", tail.lstrip() if trim_next else tail))
    return out


def parse(text: str) -> tuple[list[Node], dict[str, list[Node]]]:
    """The top-level nodes and the `define`d templates."""
    defines: dict[str, list[Node]] = {}
    stream = tokens(text)
    position = 0

    def block(stop: set[str]) -> tuple[list[Node], str]:
        nonlocal position
        nodes: list[Node] = []
        while position < len(stream):
            kind, value = stream[position]
            position += 1
            if kind == "text":
                if value:
                    nodes.append(Node("text", value))
                continue
            if value.startswith("/*"):
                continue
            word, _, rest = value.partition(" ")
            if word in stop:
                return nodes, word
            if word in ("if", "with", "range"):
                body, ended = block({"else", "end"})
                other: list[Node] = []
                if ended == "else":
                    other, _ = block({"end"})
                nodes.append(Node(word, rest.strip(), body, other))
            elif word == "define":
                body, _ = block({"end"})
                defines[literal(rest.strip())] = body
            elif word in ("else", "end", "template", "block"):
                raise TemplateError(f"unexpected {{{{ {value} }}}}")
            else:
                nodes.append(Node("output", value))
        if stop:
            raise TemplateError(f"missing {{{{ end }}}} (wanted one of {stop})")
        return nodes, ""

    nodes, _ = block(set())
    return nodes, defines


def literal(token: str) -> str:
    if not (token.startswith('"') and token.endswith('"')):
        raise TemplateError(f"expected a string, got {token}")
    return bytes(token[1:-1], "utf-8").decode("unicode_escape")


def split_words(expression: str) -> list[str]:
    return re.findall(r'"(?:\\.|[^"\\])*"|[^\s]+', expression)


def split_pipeline(expression: str) -> list[str]:
    parts = re.findall(r'(?:"(?:\\.|[^"\\])*"|[^|"])+', expression)
    return [p.strip() for p in parts]


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        raise TemplateError(f"printing a {type(value).__name__} needs toYaml: {value!r}")
    return str(value)


def to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).rstrip("\n").removesuffix("\n...")


def indent(n: int, text: str) -> str:
    return "\n".join(" " * n + line for line in text.split("\n"))


class Chart:
    def __init__(self, root: Path, values: dict | None = None,
                 release: str = "nereid", namespace: str = "default"):
        self.root = root
        meta = yaml.safe_load((root / "Chart.yaml").read_text())
        defaults = yaml.safe_load((root / "values.yaml").read_text())
        self.context = {
            "Values": merge(defaults, values or {}),
            "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
            "Chart": {key[0].upper() + key[1:]: value for key, value in meta.items()},
            "Files": self,
        }
        self.defines: dict[str, list[Node]] = {}
        self.templates: dict[str, list[Node]] = {}
        for path in sorted((root / "templates").iterdir()):
            nodes, defines = parse(path.read_text())
            self.defines.update(defines)
            if not path.name.startswith("_"):
                self.templates[path.name] = nodes

    def Get(self, name: str) -> str:  # noqa: N802 (Helm's .Files.Get)
        return (self.root / name).read_text().rstrip("\n")

    def render(self) -> dict[str, str]:
        """Each template's text, by file name."""
        return {name: self.run(nodes, self.context) for name, nodes in self.templates.items()}

    def documents(self) -> list[dict]:
        """Every object the chart makes."""
        docs = []
        for name, text in self.render().items():
            try:
                docs += [d for d in yaml.safe_load_all(text) if d]
            except yaml.YAMLError as e:
                raise TemplateError(f"{name} renders to YAML that does not parse: {e}\n{text}")
        return docs

    def run(self, nodes: list[Node], dot: Any) -> str:
        out = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.value)
            elif node.kind == "output":
                out.append(text_of(self.pipeline(node.value, dot)))
            elif node.kind == "if":
                branch = node.body if truthy(self.pipeline(node.value, dot)) else node.other
                out.append(self.run(branch, dot))
            elif node.kind == "with":
                value = self.pipeline(node.value, dot)
                out.append(self.run(node.body, value) if truthy(value) else self.run(node.other, dot))
            elif node.kind == "range":
                value = self.pipeline(node.value, dot)
                items = [value[k] for k in sorted(value)] if isinstance(value, dict) else value or []
                out.append("".join(self.run(node.body, item) for item in items)
                           if items else self.run(node.other, dot))
        return "".join(out)

    def pipeline(self, expression: str, dot: Any) -> Any:
        result: Any = None
        for i, command in enumerate(split_pipeline(expression)):
            words = split_words(command)
            args = [self.value(w, dot) for w in words[1:]]
            if i > 0:
                args.append(result)
            function = words[0][0].isalpha() or words[0] == ".Files.Get"
            if i > 0 and not function:
                raise TemplateError(f"cannot pipe into {words[0]}")
            result = self.call(words[0], args, dot) if function else self.value(words[0], dot)
        return result

    def value(self, word: str, dot: Any) -> Any:
        if word.startswith('"'):
            return literal(word)
        if re.fullmatch(r"-?\d+", word):
            return int(word)
        if word == ".":
            return dot
        if word.startswith("$"):
            base, path = self.context, word[1:]
        elif word.startswith("."):
            base, path = dot, word
        else:
            raise TemplateError(f"unknown word {word}")
        for key in filter(None, path.split(".")):
            base = base.get(key) if isinstance(base, dict) else None
        return base

    def call(self, name: str, args: list, dot: Any) -> Any:
        if name == "include":
            template, data = args
            if template not in self.defines:
                raise TemplateError(f"no template {template}")
            return self.run(self.defines[template], data)
        if name == ".Files.Get":
            return self.Get(args[0])
        functions = {
            "quote": lambda v: '"' + text_of(v).replace("\\", "\\\\").replace('"', '\\"') + '"',
            "default": lambda d, v=None: v if truthy(v) else d,
            "toYaml": to_yaml,
            "nindent": lambda n, s: "\n" + indent(n, s),
            "indent": indent,
            "trunc": lambda n, s: s[:n],
            "trimSuffix": lambda suffix, s: s.removesuffix(suffix),
            "not": lambda v: not truthy(v),
        }
        if name not in functions:
            raise TemplateError(f"the tests' renderer does not know {name}; extend tests/python/helm_template.py")
        return functions[name](*args)


def merge(base: dict, override: dict) -> dict:
    """Helm's merge of values: maps deep, null deletes, everything else
    replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
