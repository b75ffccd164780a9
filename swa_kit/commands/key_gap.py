"""``swa-kit key-gap --model DIR``: run a local Hugging Face model at W and at W-1 keys and compare."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from swa_kit import budget
from swa_kit.commands._args import add_budget_arguments, bounded_int
from swa_kit.commands._output import print_json
from swa_kit.errors import UsageError
from swa_kit.files import quote, read_json, read_text
from swa_kit.models.configs import MAX_CONFIG_BYTES, MAX_COUNT

NAME = "key-gap"
HELP = ("does one key short matter for my model? run a local Hugging Face model (transformers' own code) at its "
        "window W and at W-1 keys over one prompt: first diverging token, logit and KL gap")


MAX_PROMPT_BYTES = 16 << 20  # a prompt of millions of tokens; past that it is not a prompt file
MAX_TOKENS = 1 << 40  # far past any window: the budget check refuses long before, in one line
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="a local model directory (config.json + weights); nothing is downloaded")
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", metavar="TEXT", help="prompt text, tokenised with the model's own tokenizer")
    prompt.add_argument("--prompt-file", metavar="FILE",
                        help=f"file holding the prompt text (UTF-8, at most {MAX_PROMPT_BYTES >> 20} MiB)")
    prompt.add_argument("--random-prompt", type=bounded_int(1, MAX_TOKENS), metavar="N",
                        help="N random token ids (no tokenizer needed)")
    parser.add_argument("--new-tokens", type=bounded_int(0, MAX_TOKENS), default=32,
                        help="greedy tokens generated at each window")
    parser.add_argument("--seed", type=bounded_int(0, (1 << 63) - 1), default=0, help="seed of --random-prompt")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_budget_arguments(parser)


def _shapes(model_dir: Path) -> tuple[Any, dict[str, int]]:
    """The model's config and the shapes that bound the work, read before any weight is loaded."""
    from transformers import AutoConfig

    config_file = model_dir / "config.json"
    read_json(config_file, "--model's config", MAX_CONFIG_BYTES)  # bounded before transformers parses it
    try:
        text = AutoConfig.from_pretrained(model_dir, local_files_only=True).get_text_config()
    except (TypeError, KeyError, AttributeError, ValueError) as error:
        raise UsageError(f"--model's config {quote(str(config_file))}: transformers cannot read it "
                         f"({type(error).__name__}: {quote(str(error))})") from None
    heads = getattr(text, "num_attention_heads", None)
    shapes = {"vocab": getattr(text, "vocab_size", None), "layers": getattr(text, "num_hidden_layers", None),
              "heads": heads, "kv_heads": getattr(text, "num_key_value_heads", None) or heads,
              "head_dim": getattr(text, "head_dim", None) or _ratio(getattr(text, "hidden_size", None), heads)}
    for name, value in shapes.items():
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_COUNT:
            raise UsageError(f"--model's config {quote(str(config_file))}: {name} is {quote(value)}, not a whole "
                             f"number in 1..{MAX_COUNT:,}")
    weights = sum(f.stat().st_size for pattern in WEIGHT_FILES for f in model_dir.glob(pattern) if f.is_file())
    return text, {**shapes, "weight_bytes": weights}


def _ratio(hidden: Any, heads: Any) -> Any:
    return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 else None


def _text_prompt_ids(args: argparse.Namespace, model_dir: Path) -> list[int]:
    text = args.prompt if args.prompt is not None else read_text(args.prompt_file, "--prompt-file", MAX_PROMPT_BYTES)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)(text)["input_ids"]


def run(args: argparse.Namespace) -> int:
    import torch
    from transformers import AutoModelForCausalLM

    from swa_kit.measure.key_gap import compare_window

    model_dir = Path(args.model)
    if not (model_dir / "config.json").is_file():
        raise UsageError(f"--model {quote(args.model)}: no config.json there; pass a local model directory "
                         "(save_pretrained / a downloaded snapshot)")
    text_config, shapes = _shapes(model_dir)
    ids = None if args.random_prompt is not None else _text_prompt_ids(args, model_dir)
    tokens = args.random_prompt if ids is None else len(ids)
    budget.check(budget.key_gap_estimate(tokens, args.new_tokens, **shapes), budget.KEY_GAP_WAY_OUT)
    if ids is None:
        generator = torch.Generator().manual_seed(args.seed)
        ids = torch.randint(0, text_config.vocab_size, (tokens,), generator=generator).tolist()
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    report = compare_window(model, ids, new_tokens=args.new_tokens)
    if args.json:
        print_json(report.to_json())
    else:
        print(report.summary())
    return 0
