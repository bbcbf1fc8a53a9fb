"""`rubricrl rurl train`: GRPO / DAPO on TRL's GRPOTrainer with the rubric reward.

    rubricrl rurl train --config configs/rurl/tiny-cpu.yaml --output_dir runs/rurl

In order, everything a user can get wrong checked before the policy loads:
1. settings: ours (`TrainArgs`, `rurl:`, `grading:`, `llm:`), then GRPOConfig and ModelConfig as `trl grpo --config`
   reads them; the overlong buffer, the judge's deadline against ddp_timeout, one weight per reward function
   (rurl/reward/extra.py). `--dry_run` prints them and exits;
2. the rubric dataset (rurl/data.py): rows checked, rows that can never train refused or left out, held-out rows
   split off, the RuFT prefilter;
3. the policy's tokenizer: whether its chat template opens the reasoning in the prompt;
4. the judge (`grading.judge_role`, the local server when it names no endpoint), reachable, and one preflight call;
5. `train`: config.yaml, the wandb run, RubricGRPOTrainer (rurl/trainer.py) with the rubric reward
   (rurl/reward/rubric_reward.py), the judge-failure guard and the in-training evaluation; the model saved (LoRA
   merged), then criteria.json, log_history.json, reward.png and manifest.json (last; rurl/outputs.py), with the seconds
   each phase took. docs/outputs.md lists the folder.
   `--resume_from_checkpoint true` goes on from the latest complete checkpoint; replayed judge calls come from the
   response cache.
"""

import asyncio
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from grading.dataset import RubricRow
from grading.grader import EXPLICIT_MODES, Grader, GradingConfig
from rubricrl.config import ConfigError, config_source, parse_settings, resolved
from rubricrl.errors import UserError
from rubricrl.llm import LLMClient, Role, open_llm
from rubricrl.runs.stopwatch import Stopwatch
from rubricrl.runs.training import (
    base_model,
    begin_run,
    end_trainer,
    is_main_process,
    model_init_kwargs,
    push_finished,
    require_output_dir,
    resume_target,
    save_model,
    trl_defaults,
    trl_settings,
    wandb_run,
)
from rubricrl.runs.training import train as train_model
from rurl.config import RurlConfig, TrainArgs, check_with_trl, dropout_for_schedule
from rurl.data import RurlData, load_rurl_data
from rurl.evolving.evolution import RubricEvolution
from rurl.outputs import COMMAND, write_inputs, write_outputs
from rurl.preflight import preflight, probe_figures, probe_preflight
from rurl.reward.extra import extra_reward_funcs
from rurl.reward.overlong import Overlong
from rurl.reward.rubric_reward import make_rubric_reward
from rurl.vllm_cpu import close_colocated_engine, cpu_engine_settings, patch_cpu_colocate
from rurl.watch.evaluate import add_evaluation
from rurl.watch.summary import run_summary

if TYPE_CHECKING:
    from trl import GRPOConfig, ModelConfig

NO_JUDGE = Role(base_url="http://no-judge.invalid/v1", model="none (rule checks only)")
"""The judge role of a run whose criteria are all rule checks: never called (grading decides rules in code)."""


class TrainingStopped(UserError):
    """A guard stopped the run (after saving a checkpoint); the message says why and how to go on."""


def run_train(args) -> int:
    clock = Stopwatch()  # where the command's time goes, in the summary beside the steps' own
    with clock.phase("settings"):
        settings = parse_settings(args, command=COMMAND, trl_defaults=trl_defaults())
        train_args, rurl, grading, llm, grpo, model = settings
        # before the dry run: what the run refuses
        check_with_trl(rurl, grpo, train_args.reward_funcs, grading.mode, grading.verdict_format)
        dropout_for_schedule(args, rurl, grpo)
        check_judge_wait(rurl, grpo, grading)
        extra_rewards = extra_reward_funcs(train_args.reward_funcs)
        config = run_config(settings)
    if train_args.reward_funcs:
        weights = grpo.reward_weights or [1.0] * (1 + len(extra_rewards))
        print(
            f"{COMMAND}: rewards: "
            + ", ".join(
                f"{name} x {weight:g}" for name, weight in zip(["rubric_reward", *train_args.reward_funcs], weights)
            ),
            file=sys.stderr,
        )
    if train_args.dry_run:
        print(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), end="")
        return 0
    output_dir = require_output_dir(grpo, COMMAND)
    with clock.phase("data and tokenizer"):
        data = load_rurl_data(train_args.rubrics, rurl, grpo.seed, mode=grading.mode, grpo=grpo, model=model)
        resume = resume_target(grpo)
        base_model(model)
        config["model_name_or_path"] = model.model_name_or_path
        tokenizer = read_policy_template(grading, grpo, model, config)
    judged = first_judged_row(grading, data)

    def run(client: LLMClient) -> int:
        return train(
            train_args,
            rurl,
            grading,
            grpo,
            model,
            data,
            client,
            config,
            output_dir,
            resume,
            tokenizer,
            extra_rewards,
            clock,
        )

    if judged is None and not rurl.evolve:  # rule checks decide every criterion: no judge to start or ask
        print(f"{COMMAND}: every criterion is a rule check: no judge, no server, no preflight", file=sys.stderr)
        if grading.integrity_judge:  # it would put noted answers to the judge this run does not have
            grading.integrity_judge = False
            config.setdefault("grading", {})["integrity_judge"] = False
            print(
                f"{COMMAND}: grading.integrity_judge is off: with no judge, an answer the integrity check notes "
                "stays a note (rubric/integrity_note_rate)",
                file=sys.stderr,
            )
        return run(LLMClient({grading.judge_role: NO_JUDGE}, cache=None))
    roles = [grading.judge_role, *(["monitor"] if rurl.monitor_judge else []), *(["evolver"] if rurl.evolve else [])]
    budgets = {**grading.cpu_max_tokens(), "evolver": 150 + 90 * rurl.evolve_max_new}  # as synthesis's evolver
    budgets["monitor"] = budgets[grading.judge_role]
    with open_llm(llm, roles, source=config_source(args), cpu_budgets=budgets) as llm_session:
        if rurl.monitor_judge:
            check_monitor(llm_session.roles, grading.judge_role)
        if rurl.preflight and judged is not None:  # else only evolved criteria will ask the judge
            with clock.phase("judge preflight"):
                preflight(llm_session.roles, grading, judged)
        if rurl.probe_rows:
            with clock.phase("probe preflight"):
                probe_preflight(llm_session, grading, data.train, rurl, output_dir)
        client = llm_session.client()
        try:
            return run(client)
        finally:
            if client.cache is not None:
                client.cache.flush()


def run_config(settings: list[Any]) -> dict[str, Any]:
    """The resolved settings, loadable with --config: ours (top level and sections), then GRPOConfig's and
    ModelConfig's fields."""
    ours, (grpo, model) = settings[:-2], settings[-2:]
    config = {**resolved(ours), **trl_settings(grpo), **asdict(model)}
    del config["dry_run"]  # the written config reruns the training, not the dry run
    # GRPOConfig derives one of these two from the other and refuses both: keep steps_per_generation, which gives
    # back the same generation batch on the same number of processes
    del config["generation_batch_size"]
    return config


def read_policy_template(
    grading: GradingConfig, grpo: "GRPOConfig", model: "ModelConfig", config: dict[str, Any]
) -> Any:
    """What the policy's tokenizer tells the reward: whether its chat template opens the reasoning in the prompt
    (DeepSeek-R1 distills, Qwen3 thinking-2507 end the generation prompt with `<think>`; a completion without the
    closing delimiter then never closed its reasoning), set in `grading` and in the written `config`. Returns the
    tokenizer: the reward reads completions and counts reasoning and answer tokens with it."""
    from transformers import AutoTokenizer

    load = {"revision": model.model_revision, "trust_remote_code": grpo.trust_remote_code}
    try:
        tokenizer = AutoTokenizer.from_pretrained(model.model_name_or_path, **load)
    except OSError as error:  # transformers: not on the Hub, offline, no tokenizer files
        raise ConfigError(
            f"model_name_or_path {model.model_name_or_path}: cannot load its tokenizer: {error}"
        ) from None
    if grading.reasoning_delimiters and not grading.reasoning_starts_open and tokenizer.chat_template:
        kwargs = grpo.chat_template_kwargs if isinstance(grpo.chat_template_kwargs, dict) else {}
        try:
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": "?"}], tokenize=False, add_generation_prompt=True, **kwargs
            )
        except Exception as error:  # noqa: BLE001 - a template's own check (a system turn required, a jinja error)
            raise ConfigError(
                f"model_name_or_path {model.model_name_or_path}: its chat template cannot render one user "
                f"turn: {error}; set grading.reasoning_starts_open yourself"
            ) from None
        if prompt.rstrip().endswith(grading.reasoning_delimiters[0]):
            grading.reasoning_starts_open = True
            config.setdefault("grading", {})["reasoning_starts_open"] = True
            print(
                f"{COMMAND}: {model.model_name_or_path}'s chat template opens the reasoning in the prompt: a "
                f"completion without {grading.reasoning_delimiters[1]!r} has no answer (reward 0)",
                file=sys.stderr,
            )
    return tokenizer


def first_judged_row(grading: GradingConfig, data: RurlData) -> RubricRow | None:
    """The first row that needs the judge: any row in a rating mode, else one with a criterion that is no rule."""
    rows = data.train + data.evaluation
    if grading.mode not in EXPLICIT_MODES:
        return rows[0]
    return next((row for row in rows if any(c.rule is None for c in row.rubric.criteria)), None)


def train(
    train_args: TrainArgs,
    rurl: RurlConfig,
    grading: GradingConfig,
    grpo: "GRPOConfig",
    model: "ModelConfig",
    data: RurlData,
    client: LLMClient,
    config: dict[str, Any],
    output_dir: Path,
    resume: str | None,
    tokenizer=None,
    extra_rewards=(),
    clock: Stopwatch | None = None,
) -> int:
    from rurl.watch.alarms import RewardAlarms
    from rurl.watch.guards import FailureMonitor, StopOnJudgeFailures, StopOnRequest

    clock = clock or Stopwatch()
    grader = Grader(client, grading)
    monitor = FailureMonitor(rurl.failure_window, rurl.criteria_window)
    evolution = RubricEvolution(rurl, grading, client, data) if rurl.evolve else None
    reward = run_reward(grader, rurl, grpo, evolution, tokenizer)
    data_info = {
        "source": data.source,
        "train_rows": len(data.train),
        "eval_rows": len(data.evaluation),
        "prefilter": data.prefiltered or None,
        "prefilter_role": data.prefilter_role,
        "bad_rows": data.bad_rows or None,
        "judge": grader.metadata,
    }
    run_settings = {**config, "data": data_info}
    main_process = is_main_process(grpo)

    begin_run(
        grpo,
        config,
        f"{COMMAND}: {model.model_name_or_path}{' (LoRA)' if model.use_peft else ''} on {len(data.train)} queries "
        f"of {data.source} ({len(data.evaluation)} held out), {grpo.num_generations} completions each, judge "
        f"{grader.metadata['judge_model']} ({grading.mode}) -> {output_dir}",
    )
    if main_process:
        write_inputs(data, output_dir)
    trainer = None
    try:
        with wandb_run(grpo, run_settings, COMMAND) as wandb:
            with clock.phase("trainer"):  # the policy loaded, LoRA applied, the callbacks
                trainer = build_trainer(rurl, grpo, model, data, [reward, *extra_rewards], monitor, evolution)
                guard, requested = StopOnJudgeFailures(monitor, grading.max_failure_rate), StopOnRequest(trainer)
                trainer.add_callback(guard)
                trainer.add_callback(requested)
                alarms = RewardAlarms(trainer, rurl, monitor, resumed=resume is not None)
                evaluation = add_evaluation(trainer, grader, data, rurl, output_dir, alarms, resume)
                trainer.add_callback(alarms)  # after the evaluation: a divergence found at a step stops at that step
            trained = train_model(trainer, resume, wandb, run_settings)
            evaluated = evaluation.seconds if evaluation else 0.0
            clock.add("steps and checkpoints", trained.seconds - evaluated)
            clock.add("evaluation", evaluated)
            stopped = trainer.judge_error or guard.reason or requested.reason  # the most specific first
            criteria = trainer.criteria_table()  # every process (it gathers), before the main process merges alone
            if not stopped:
                with clock.phase(
                    "model saved" + (" (LoRA merged)" if model.use_peft and train_args.merge_adapter else "")
                ):
                    save_model(trainer, output_dir, model.use_peft and train_args.merge_adapter)
            if main_process:
                summary = run_summary(
                    trainer, monitor, evaluation, trained.first_step, trained.seconds, stopped, criteria, alarms.fired
                )
                summary["seconds_by_phase"] = clock.rounded()  # before the outputs: they are written with it
                summary["usage_main_process"] = {role: asdict(usage) for role, usage in client.usage.items()}
                summary["ledger"] = trainer.run_ledger.finish(wandb)
                if evolution is not None:
                    summary["evolve"] = evolution.finish(output_dir, wandb)
                if rurl.probe_rows:
                    summary["probe_preflight"] = probe_figures(output_dir, wandb)
                write_outputs(trainer, output_dir, config, data_info, criteria, summary, wandb)
                if not stopped:  # the finished folder, its model card and gold-best/ included
                    push_finished(trainer, output_dir, COMMAND)
            # Every process leaves together: one raising its stop first would exit non-zero while the main process
            # still writes the outputs, and torchrun would end that one before it said why (or wrote them).
            trainer.accelerator.wait_for_everyone()
            close_colocated_engine(trainer)  # first: a colocated vLLM engine tears down its groups while they exist
            end_trainer(trainer)
    finally:
        if trainer is not None:  # the client's HTTP sessions live on TRL's event loop
            asyncio.run_coroutine_threadsafe(client.aclose(), trainer.async_loop).result(timeout=60)
    if stopped:
        checkpoint = output_dir / f"checkpoint-{trainer.state.global_step}"
        raise TrainingStopped(
            f"{stopped}. Stopped at step {trainer.state.global_step}, checkpoint {checkpoint}; "
            "fix the cause and rerun with --resume_from_checkpoint true"
        )
    return 0


def run_reward(grader: Grader, rurl: RurlConfig, grpo: "GRPOConfig", evolution=None, tokenizer=None):
    """The run's rubric reward (rurl/reward/rubric_reward.py): DAPO's overlong penalty and rubric dropout as configured,
    rubrics from `evolution` when they evolve, completions read and measured with the policy's `tokenizer`. The trainer
    reads each batch's statistics from its result."""
    overlong = (
        Overlong(grpo.max_completion_length, rurl.overlong_buffer, rurl.overlong_penalty)
        if rurl.overlong_buffer
        else None
    )
    reading = (
        {}
        if tokenizer is None
        else {  # completions read as TRL decodes them, lengths in policy tokens
            "count_tokens": lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]),
            "decode": lambda ids: tokenizer.batch_decode(ids, skip_special_tokens=True),
        }
    )
    return make_rubric_reward(
        grader,
        overlong=overlong,
        deadline=rurl.judge_deadline,
        rubric_for=evolution.rubric_for if evolution else None,
        dropout=rurl.dropout,
        reask=rurl.ledger_reask,
        **reading,
    )


def build_trainer(
    rurl: RurlConfig, grpo: "GRPOConfig", model: "ModelConfig", data: RurlData, reward_funcs, monitor, evolution=None
):
    """RubricGRPOTrainer as `trl grpo` builds GRPOTrainer: the model's load settings from ModelConfig, the user's
    model_init_kwargs on top; dynamic sampling when asked."""
    from trl import get_peft_config, get_quantization_config

    from rurl.schedule.dynamic_sampling import DynamicSampling
    from rurl.trainer_import import rubric_trainer_class

    grpo.model_init_kwargs = model_init_kwargs(grpo, model)
    if get_quantization_config(model) is not None:
        raise ConfigError("load_in_4bit / load_in_8bit: not supported by `rurl train` yet")
    RubricGRPOTrainer = rubric_trainer_class(grpo.use_vllm)
    dynamic = (
        DynamicSampling(rurl.dynamic_std_threshold, rurl.max_extra_rounds, rurl.on_exhausted)
        if rurl.dynamic_sampling
        else None
    )
    try:
        with cpu_engine_settings(grpo.use_vllm, grpo.vllm_mode):
            trainer = RubricGRPOTrainer(
                model=model.model_name_or_path,
                reward_funcs=reward_funcs,
                args=grpo,
                train_dataset=data.train_dataset(),
                peft_config=get_peft_config(model),
                dynamic=dynamic,
                failure_monitor=monitor,
                evolution=evolution,
                async_steps=rurl.async_steps,
                criterion_advantage=rurl.criterion_advantage,
            )
        if evolution is not None:
            evolution.attach(trainer)
    except OSError as error:  # transformers: not on the Hub, offline, no weights in the folder
        raise ConfigError(f"model_name_or_path {model.model_name_or_path}: cannot load: {error}") from None
    if grpo.use_vllm:  # TRL's colocated weight push fails on vLLM's CPU build: rurl/vllm_cpu.py
        patch_cpu_colocate(trainer)
    return trainer


def check_monitor(roles: dict[str, Role], judge_role: str) -> None:
    """A monitor that is the training judge (the same model and parameters, wherever it is served) would get the
    judge's own answers back from the response cache, which keys requests by model, not address: its gap would
    stay 0 while real endpoints disagree. Refused before the policy loads."""
    judge, monitor = roles[judge_role], roles["monitor"]
    if judge.model == monitor.model and judge.sampling_params() == monitor.sampling_params():
        raise ConfigError(
            f"rurl.monitor_judge: the monitor role is the training judge ({monitor.model}, the same parameters; "
            f"{monitor.base_url} and {judge.base_url}): it would be answered from the judge's cached verdicts and "
            "never disagree; give the monitor another model (llm.roles.monitor.model)"
        )


def check_judge_wait(rurl: RurlConfig, grpo: "GRPOConfig", grading: GradingConfig) -> None:
    """The longest a process waits for the judge in one step (the reward's deadline) must leave room within the
    process group's timeout: the other processes wait at the next collective, and reaching ddp_timeout kills the
    whole job without a checkpoint. Half of it is left for generation and the rest of the step."""
    if rurl.judge_deadline > grpo.ddp_timeout / 2:
        raise ConfigError(
            f"rurl.judge_deadline {rurl.judge_deadline:g} s is more than half of ddp_timeout "
            f"{grpo.ddp_timeout} s: a step waiting that long for its judge, plus its generation, could "
            "reach the process group's timeout, which kills the run without a checkpoint; lower "
            "--judge_deadline or raise --ddp_timeout"
        )
    if rurl.evolve and grading.mode not in EXPLICIT_MODES:
        raise ConfigError(
            f"rurl.evolve: grading.mode {grading.mode} decides no criterion, so no evolved one would count"
        )
    if rurl.evolve and rurl.evolve_apply == "same_step" and rurl.evolve_deadline > grpo.ddp_timeout / 2:
        raise ConfigError(
            f"rurl.evolve_deadline {rurl.evolve_deadline:g} s is more than half of ddp_timeout "
            f"{grpo.ddp_timeout} s (the other processes wait for the evolve calls): lower it"
        )
