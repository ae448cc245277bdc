"""Closed-loop load on an OpenAI-compatible `/v1/completions` route (Nereid's
`--openai-port`, llama.cpp's llama-server): `concurrency` clients, each
sending its next request when the last one ends, every request streamed
with `max_tokens` tokens forced (`ignore_eos`) at temperature 0.

Workloads (prompts from a fixed seed, so both servers get the same ones):
- mixed: prompts of 50 to 1,000 tokens;
- shared: a 500-token system prompt that every request shares, then a
  short question;
- long: every fourth prompt about 2,000 tokens, the others short.

Prints one JSON object: generated tokens per second, time to first token
p50/p99, time per output token p50, failures, and the first failure."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time

import requests

WORDS = (
    "the of and to in is was that for on with as by at from his her they this which or "
    "an are be had have not but were all one their there been has more if will would so "
    "what when who can about into than them some could time only new these two may first "
    "then do any like my now over such our man me even most made after also did many "
    "before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work "
    "long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three"
).split()


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def prompts(workload: str, count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    if workload == "shared":
        system = "System: " + text(random.Random(1), 480) + "\n"
        return [system + f"Question {i}: " + text(rng, 12) + "\nAnswer:" for i in range(count)]
    if workload == "long":
        # About a token a word with SmolLM2's tokenizer.
        return [text(rng, 2000 if i % 4 == 0 else rng.randint(50, 100)) for i in range(count)]
    return [text(rng, rng.randint(50, 1000)) for _ in range(count)]


def one(url: str, model: str, prompt: str, max_tokens: int) -> dict:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    start = time.monotonic()
    first = None
    pieces = 0
    usage = None
    with requests.post(f"{url}/completions", json=body, stream=True, timeout=1800) as answer:
        if answer.status_code != 200:
            return {"error": f"{answer.status_code}: {answer.text[:300]}"}
        for line in answer.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                return {"error": json.dumps(chunk["error"])[:300]}
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                if choice.get("text"):
                    pieces += 1
                    if first is None:
                        first = time.monotonic()
    end = time.monotonic()
    tokens = (usage or {}).get("completion_tokens") or max_tokens
    if first is None:
        return {"error": "no text came back"}
    return {"ttft": first - start, "tpot": (end - first) / max(tokens - 1, 1), "tokens": tokens,
            "end": end}


def run(url: str, model: str, concurrency: int, requests_total: int, workload: str,
        max_tokens: int) -> dict:
    todo = prompts(workload, requests_total)
    lock = threading.Lock()
    results: list[dict] = []

    def client():
        while True:
            with lock:
                if not todo:
                    return
                prompt = todo.pop(0)
            try:
                result = one(url, model, prompt, max_tokens)
            except requests.RequestException as e:
                result = {"error": str(e)}
            with lock:
                results.append(result)

    start = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    done = [r for r in results if "error" not in r]
    failed = [r["error"] for r in results if "error" in r]
    ttft = sorted(r["ttft"] for r in done) or [float("nan")]
    return {
        "concurrency": concurrency, "workload": workload, "requests": len(results),
        "failed": len(failed), "first_failure": failed[0] if failed else None,
        "tokens_per_s": sum(r["tokens"] for r in done) / wall,
        "ttft_p50": statistics.median(ttft),
        "ttft_p99": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
        "tpot_p50": statistics.median([r["tpot"] for r in done]) if done else float("nan"),
        "wall_s": wall,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="the /v1 base URL")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--workload", choices=["mixed", "shared", "long"], default="mixed")
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    print(json.dumps(run(args.url, args.model, args.concurrency, args.requests, args.workload,
                         args.max_tokens)))


if __name__ == "__main__":
    main()
