"""``swa-kit key-gap --model DIR``: run a local Hugging Face model at W and at W-1 keys and compare."""

from __future__ import annotations

import argparse
from pathlib import Path

from swa_kit.commands._output import print_json
from swa_kit.errors import UsageError

NAME = "key-gap"
HELP = ("does one key short matter for my model? run a local Hugging Face model (transformers' own code) at its "
        "window W and at W-1 keys over one prompt: first diverging token, logit and KL gap")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="a local model directory (config.json + weights); nothing is downloaded")
    prompt = parser.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", metavar="TEXT", help="prompt text, tokenised with the model's own tokenizer")
    prompt.add_argument("--prompt-file", metavar="FILE", help="file holding the prompt text")
    prompt.add_argument("--random-prompt", type=int, metavar="N", help="N random token ids (no tokenizer needed)")
    parser.add_argument("--new-tokens", type=int, default=32, help="greedy tokens generated at each window")
    parser.add_argument("--seed", type=int, default=0, help="seed of --random-prompt")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _prompt_ids(args: argparse.Namespace, model_dir: Path, vocab: int) -> list[int]:
    if args.random_prompt is not None:
        import torch

        if args.random_prompt < 1:
            raise UsageError(f"--random-prompt {args.random_prompt}: a number of tokens >= 1")
        generator = torch.Generator().manual_seed(args.seed)
        return torch.randint(0, vocab, (args.random_prompt,), generator=generator).tolist()
    text = args.prompt if args.prompt is not None else Path(args.prompt_file).read_text()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)(text)["input_ids"]


def run(args: argparse.Namespace) -> int:
    from transformers import AutoModelForCausalLM

    from swa_kit.measure.key_gap import compare_window

    model_dir = Path(args.model)
    if not (model_dir / "config.json").is_file():
        raise UsageError(f"--model {args.model}: no config.json there; pass a local model directory "
                         "(save_pretrained / a downloaded snapshot)")
    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    report = compare_window(model, _prompt_ids(args, model_dir, model.config.get_text_config().vocab_size),
                            new_tokens=args.new_tokens)
    if args.json:
        print_json(report.to_json())
    else:
        print(report.summary())
    return 0
