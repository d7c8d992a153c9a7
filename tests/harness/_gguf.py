"""The tiny GGUF model llama.cpp serves, written directly with the ``gguf`` package.

No torch and no download: random F16 weights in llama.cpp's ``llama`` layout and a
SentencePiece-style vocabulary built from seeded pseudo-text. The output-head rows of
the special and byte tokens are zero, so with llama-server's default top-k sampling
the random model never emits EOS (answers run to ``max_tokens``) nor a lone byte
(no invalid UTF-8 on the wire).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from harness import _text
from harness._cache import cache_dir, locked

GGUF_MODEL_VERSION = 1  # bump when the recipe changes
LAYERS = 8
HIDDEN = 512
FEED_FORWARD = 1536
HEADS = 8
CONTEXT = 16384
SPACE = "\u2581"  # SentencePiece's word-boundary mark


def vocabulary(seed: int, size: int = 1024) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types: specials, the 256 bytes, characters, word pieces."""
    from gguf import TokenType as _T  # a dev dependency: imported only when needed

    tokens = ["<unk>", "<s>", "</s>"]
    types = [_T.UNKNOWN, _T.CONTROL, _T.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [_T.BYTE] * 256
    pieces: dict[str, None] = dict.fromkeys([SPACE, *(chr(c) for c in range(0x21, 0x7F))])
    for word in _text.words(seed):
        pieces.setdefault(SPACE + word, None)
        pieces.setdefault(SPACE + word.capitalize(), None)
        for cut in range(1, len(word)):  # prefixes let the greedy merges reach whole words
            pieces.setdefault(SPACE + word[:cut], None)
        if len(tokens) + len(pieces) >= size:
            break
    normal = list(pieces)[: size - len(tokens)]
    scores = [0.0] * len(tokens) + [-float(i) for i in range(len(normal))]
    tokens += normal
    types += [_T.NORMAL] * len(normal)
    return tokens, scores, [int(t) for t in types]


def write_gguf(path: Path, seed: int = 0, layers: int = LAYERS) -> None:
    """Write the model to ``path`` (about 55 MB at 8 layers, about a second)."""
    import gguf

    tokens, scores, types = vocabulary(seed)
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    ones = np.ones(HIDDEN, dtype=np.float32)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(f"saber-tiny-llama-seed{seed}")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)

    # numpy shapes are (out, in); gguf reverses them into ggml's (in, out).
    writer.add_tensor("token_embd.weight", weight(len(tokens), HIDDEN))
    for i in range(layers):
        blk = f"blk.{i}"
        writer.add_tensor(f"{blk}.attn_norm.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{blk}.{name}.weight", weight(HIDDEN, HIDDEN))
        writer.add_tensor(f"{blk}.ffn_norm.weight", ones)
        writer.add_tensor(f"{blk}.ffn_gate.weight", weight(FEED_FORWARD, HIDDEN))
        writer.add_tensor(f"{blk}.ffn_up.weight", weight(FEED_FORWARD, HIDDEN))
        writer.add_tensor(f"{blk}.ffn_down.weight", weight(HIDDEN, FEED_FORWARD))
    writer.add_tensor("output_norm.weight", ones)
    head = weight(len(tokens), HIDDEN)
    # Never EOS, never a lone byte: their logits stay 0, below default top-k's cut.
    head[[i for i, t in enumerate(types) if t != gguf.TokenType.NORMAL]] = 0
    writer.add_tensor("output.weight", head)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def ensure_gguf_model(seed: int = 0, layers: int = LAYERS) -> Path:
    """The tiny llama.cpp model for ``seed``, written once into the cache. More
    ``layers``: the same model shape, slower in proportion (the drift test's engine)."""
    deeper = "" if layers == LAYERS else f"-{layers}layers"
    path = cache_dir() / "models" / f"tiny-llama-v{GGUF_MODEL_VERSION}-seed{seed}{deeper}.gguf"
    if path.is_file():
        return path
    with locked(path):
        if not path.is_file():
            partial = path.with_name(path.name + ".partial")
            write_gguf(partial, seed, layers)
            os.replace(partial, path)  # atomic: a file at ``path`` is always complete
    return path
