"""Prints a variant of a model's config.pbtxt for benches/batching.sh.

    python3 benches/mlp_config.py model_repository/mlp/config.pbtxt \
        [--no-dynamic-batching] [--instances N] [--intra-threads N]

Without flags the config is printed unchanged. --no-dynamic-batching drops
the top-level `dynamic_batching` block; --instances replaces any
`instance_group` with one KIND_CPU group of N; --intra-threads replaces any
`intra_op_thread_count` parameter. The rest of the text is kept as written.
"""

import argparse
import re
import sys

FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def top_level_fields(text):
    """(name, start, end) of each top-level field, end past its value."""
    fields, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl
        else:
            m = FIELD.match(text, i)
            if not m:
                sys.exit(f"mlp_config: cannot read the config at offset {i}: {text[i:i + 30]!r}")
            end = value_end(text, m.end())
            fields.append((m.group(), i, end))
            i = end
    return fields


def value_end(text, i):
    """The end of the value after a field name at i: a scalar to the end of
    its line, or a {...} / [...] block (strings and comments skipped)."""
    j = i
    while j < len(text) and text[j] in " \t:":
        j += 1
    if j >= len(text) or text[j] not in "{[":
        nl = text.find("\n", j)
        return len(text) if nl < 0 else nl
    depth, quote = 0, None
    while j < len(text):
        c = text[j]
        if quote:
            if c == "\\":
                j += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#":
            nl = text.find("\n", j)
            j = len(text) if nl < 0 else nl
            continue
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    sys.exit("mlp_config: unbalanced braces in the config")


def without(text, drop):
    """The text without the top-level fields for which drop(name, body) holds."""
    kept, last = [], 0
    for name, start, end in top_level_fields(text):
        if drop(name, text[start:end]):
            kept.append(text[last:start].rstrip(" \t"))
            last = end
    kept.append(text[last:])
    return re.sub(r"\n{3,}", "\n\n", "".join(kept))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--no-dynamic-batching", action="store_true")
    parser.add_argument("--instances", type=int)
    parser.add_argument("--intra-threads", type=int)
    args = parser.parse_args()
    with open(args.config) as f:
        text = f.read()
    if args.no_dynamic_batching:
        text = without(text, lambda name, _: name == "dynamic_batching")
    extra = []
    if args.instances is not None:
        text = without(text, lambda name, _: name == "instance_group")
        extra.append(f"instance_group [ {{ kind: KIND_CPU, count: {args.instances} }} ]")
    if args.intra_threads is not None:
        text = without(text, lambda name, body: name == "parameters"
                       and "intra_op_thread_count" in body)
        extra.append('parameters { key: "intra_op_thread_count" '
                     f'value: {{ string_value: "{args.intra_threads}" }} }}')
    sys.stdout.write(text.rstrip("\n") + "\n" + "".join(line + "\n" for line in extra))


if __name__ == "__main__":
    main()
