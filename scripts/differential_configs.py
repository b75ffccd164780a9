"""Write the differential's configs for architectures the kit does not bundle, saved by transformers' own classes.

Each config is a published checkpoint's hyperparameters (the model card's config.json values the class needs),
built with transformers' config class and saved with ``to_dict()``, so the file is what transformers writes.
Run once with transformers 5.x; the output is committed under tests/data/differential/.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import transformers

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "differential"

#: name -> (config class, architecture, published hyperparameters)
CONFIGS = {
    "gemma2-9b": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        vocab_size=256000, hidden_size=3584, intermediate_size=14336, num_hidden_layers=42, num_attention_heads=16,
        num_key_value_heads=8, head_dim=256, sliding_window=4096, max_position_embeddings=8192, dtype="bfloat16")),
    "gemma3-1b": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
        num_key_value_heads=1, head_dim=256, sliding_window=512, max_position_embeddings=32768, dtype="bfloat16")),
    # transformers' Gemma3nTextConfig defaults are google/gemma-3n-E4B's text model (see gemma3n-e4b-mm below).
    "gemma3n-e4b": ("Gemma3nTextConfig", "Gemma3nForCausalLM", dict(dtype="bfloat16")),
    "mistral-7b-v0.1": ("MistralConfig", "MistralForCausalLM", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, sliding_window=4096, max_position_embeddings=32768, dtype="bfloat16")),
    # The same checkpoint stored in float32: SGLang serves its KV cache in 16 bits (_get_and_verify_dtype).
    "mistral-fp32-7b-v0.1": ("MistralConfig", "MistralForCausalLM", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, sliding_window=4096, max_position_embeddings=32768, dtype="float32")),
    # google/gemma-4-31b-it's text model saved as the text-only class (the bundled gemma4-31b.json's text_config
    # values: 60 layers, 32 q / 16 kv heads of 256 on sliding layers, 4 kv heads of 512 on full layers, window
    # 1024, 256K context; transformers' defaults for the rest, as the bundled file).
    "gemma4-31b-text": ("Gemma4TextConfig", "Gemma4ForCausalLM", dict(
        num_hidden_layers=60, num_attention_heads=32, num_key_value_heads=16, head_dim=256, global_head_dim=512,
        num_global_key_value_heads=4, attention_k_eq_v=True, sliding_window=1024, max_position_embeddings=262144,
        dtype="bfloat16")),
    # google/gemma-3n-E4B-it as the multimodal class: transformers' Gemma3nTextConfig defaults are the E4B text
    # model (35 layers, 4 sliding : 1 full, window 512, 8 q / 2 kv heads of 256, hidden 2048; gemma's own
    # gm.nn.Gemma3n_E4B config lists the same). Vision and audio keep transformers' defaults.
    "gemma3n-e4b-mm": ("Gemma3nConfig", "Gemma3nForConditionalGeneration", dict(
        text_config=dict(dtype="bfloat16"), dtype="bfloat16")),
    # CohereForAI/c4ai-command-r7b-12-2024 (model card: 32 layers of hidden 4096, q 4096 / kv 1024 projections =
    # 32 / 8 heads of 128, MLP 14336, vocabulary 256000, 128K context; transformers' cohere2 docs: three sliding
    # layers of window 4096, then one global).
    "command-r7b": ("Cohere2Config", "Cohere2ForCausalLM", dict(
        vocab_size=256000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, sliding_window=4096, max_position_embeddings=131072, dtype="bfloat16")),
    # LGAI-EXAONE/EXAONE-4.0-32B (transformers' exaone4 docs: local (sliding) and global layers 3:1; the 32B text
    # model's shape, as EXAONE 4.5's text_config lists it: hidden 5120, MLP 27392, 64 layers, 40 q / 8 kv heads of
    # 128, window 4096, sliding_window_pattern "LLLG" with explicit layer_types; vocabulary 102400, 128K context).
    "exaone4-32b": ("Exaone4Config", "Exaone4ForCausalLM", dict(
        vocab_size=102400, hidden_size=5120, intermediate_size=27392, num_hidden_layers=64, num_attention_heads=40,
        num_key_value_heads=8, head_dim=128, sliding_window=4096, sliding_window_pattern="LLLG",
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(64)],
        max_position_embeddings=131072, dtype="bfloat16")),
    # A two-layer EAGLE-style draft for speculative launches: a Llama-shaped model SGLang reads as the draft.
    "draft-llama-2l": ("LlamaConfig", "LlamaForCausalLMEagle", dict(
        vocab_size=262144, hidden_size=2048, intermediate_size=8192, num_hidden_layers=2, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=131072, dtype="bfloat16")),
    # A two-layer hybrid-SWA draft for STANDALONE launches: GPT-OSS-20B's attention shape cut to one sliding and
    # one full layer. SGLang's STANDALONE worker loads any causal LM as the draft, and GptOssForCausalLM is
    # hybrid-SWA (configs/model_config.py is_hybrid_swa_model), so its sliding layer counts as
    # eagle_draft_swa_num_layers.
    "draft-gpt-oss-2l": ("GptOssConfig", "GptOssForCausalLM", dict(
        vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=2, num_attention_heads=64,
        num_key_value_heads=8, head_dim=64, sliding_window=128, num_local_experts=32, num_experts_per_tok=4,
        layer_types=["sliding_attention", "full_attention"], max_position_embeddings=131072, dtype="bfloat16")),
}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (cls, arch, params) in CONFIGS.items():
        config = getattr(transformers, cls)(**params)
        raw = config.to_dict()
        raw["architectures"] = [arch]
        (OUT / f"{name}.json").write_text(json.dumps(raw, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {cls} -> {arch}, {raw.get('num_hidden_layers')} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
