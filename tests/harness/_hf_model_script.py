"""Write the tiny Hugging Face Llama that vLLM serves (run under the vLLM venv's python).

This file is executed as a script by a different interpreter, the vLLM environment,
which has torch, transformers and tokenizers; it imports nothing from saber.

    python _hf_model_script.py OUT_DIR CORPUS_FILE SEED
"""

from __future__ import annotations

import sys
from pathlib import Path

# Installed in the vLLM environment only, hence no stubs here.
import torch  # type: ignore[import-not-found]
from tokenizers import (  # type: ignore[import-not-found]
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    trainers,
)
from transformers import (  # type: ignore[import-not-found]
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0..3, in Llama's order
VOCAB = 2048
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def tokenizer(corpus: str) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus.splitlines(), trainer=trainer)
    if tok.get_vocab_size() != VOCAB:
        raise SystemExit(f"corpus too small: vocabulary of {tok.get_vocab_size()}, not {VOCAB}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=16384,
    )


def main(out: Path, corpus_file: Path, seed: int) -> None:
    torch.manual_seed(seed)
    tok = tokenizer(corpus_file.read_text())
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=16384,  # room for requests that run long enough to abort
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
