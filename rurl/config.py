"""What `rubricrl rurl train` adds to TRL's GRPOConfig: the rubric data, dynamic sampling, the judge-failure guard,
overlong shaping and evaluation. Loaded from the `rurl:` section of a config (configs/rurl/*.yaml); documented field
by field. The command's own arguments (`TrainArgs`) are top-level keys, beside GRPOConfig's and ModelConfig's."""

import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from checks.probe_test import ProbeTest
from rubricrl.config import ConfigError, load_yaml
from rurl.reward.criterion_advantage import MODES as CRITERION_MODES
from rurl.reward.dropout import RubricDropout

if typing.TYPE_CHECKING:
    from trl import GRPOConfig


@dataclass
class TrainArgs:
    rubrics: Path
    """The rubric dataset: synthesis's final.parquet / .jsonl, HealthBench rows (prompt, rubrics, example_tags) or
    RaR rows (question, reference_answer, rubric); JSONL, Parquet, a saved HF dataset, a repository folder or a Hub
    id (org/name[:SPLIT]). Multi-turn prompts keep their turns. Set --output_dir (TRL's) too."""
    dry_run: bool = False
    """Print the resolved settings (YAML, loadable with --config) and exit: no model, no judge call."""
    merge_adapter: bool = True
    """With --use_peft: save the final model with the LoRA weights merged in (the adapter alone in
    output_dir/adapter); false: output_dir holds only the adapter."""
    reward_funcs: list[str] = field(default_factory=list)
    """More reward functions after the rubric reward, as `trl grpo --reward_funcs` takes them: TRL's names
    (accuracy_reward, reasoning_accuracy_reward, think_format_reward, get_soft_overlong_punishment) or dotted
    import paths (my_lib.rewards.my_reward). GRPOConfig's reward_weights weigh them, the rubric reward's first; each
    is logged as rewards/<name>/mean. A completion the rubric reward could not score stays out of the advantage
    whatever the others return."""


@dataclass
class RurlConfig:
    config_section: ClassVar[str] = "rurl"

    eval_size: float = 0.0
    """Rubric rows held out for evaluation: a share (0 < x < 1) or a count (>= 1); 0: none. The split is seeded
    (GRPOConfig's seed) and the held-out ids are written to output_dir/eval_ids.txt."""
    eval_rubrics: Path | None = None
    """Evaluate on another rubric dataset (any format `grade` reads, e.g. HealthBench-Hard) instead of rows held out
    of the training data; eval_size must then be 0."""
    eval_every: int = 0
    """Steps between HealthBench-style evaluations of the policy on the held-out rows (overall, per axis and theme,
    bootstrap std), logged as eval/...; 0: only once, at the end (when rows are held out)."""
    eval_max_examples: int = 64
    """At most this many held-out rows per evaluation (the first ones, the same every time)."""

    prefilter: Path | None = None
    """A `ruft build` output folder: train only on queries whose candidate scores vary (the offline form of
    dynamic sampling), by prefilter_min_std and prefilter_mean_range."""
    prefilter_min_std: float = 0.05
    """Keep a query when the std of its candidates' scores is above this."""
    prefilter_mean_range: list[float] = field(default_factory=lambda: [0.05, 0.95])
    """... and their mean score lies inside this band [low, high] (neither solved nor hopeless)."""
    prefilter_role: str | None = None
    """The candidate role (ruft.candidates) whose scores the prefilter measures: the spread of one model's answers
    is what GRPO will see from the policy, a mix of models measures the gap between them. Default: the role named
    `policy` when the build has one, else the role with the most candidates (a tie is refused: name one)."""

    bad_rows: Literal["refuse", "skip"] = "refuse"
    """Rows that can never train, checked when the data loads, before the policy: a rubric whose criteria hold no
    positive points (explicit grading modes: its reward is always None, and the judge-failure guard would blame the
    judge) and a prompt longer than the policy's prompt budget (the context, vllm_max_model_length or the model's
    max_position_embeddings, minus max_completion_length; counted with the policy's chat template, as TRL does).
    refuse: stop with one line naming them (file, row, id); skip: leave them out, list them on stderr and count them
    in the manifest's data info."""

    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: a group whose reward std is <= dynamic_std_threshold does not enter the batch, more
    prompts are generated until the batch is full."""
    dynamic_std_threshold: float = 0.02
    """Rubric scores are continuous: a group whose rewards differ by a hair is as flat as a zero-std one (its
    advantages would be noise divided by a tiny std). Under criterion_advantage decoupled or discriminating a group
    is flat when the advantages it would train on are all zero, and this does not apply."""
    max_extra_rounds: int = 4
    """At most this many extra generation rounds per batch (verl's filter_groups.max_num_gen_batches); they draw
    prompts not found flat this epoch. Kept groups are pooled over the processes."""
    on_exhausted: Literal["repeat", "stop"] = "repeat"
    """When the extra rounds run out before the batch is full: repeat the kept groups to fill it (logged as
    dynamic_sampling/repeated_groups), or stop (verl's DAPO raises there): no update from that step, a checkpoint,
    and the run ends. When no group at all was kept, the run stops either way."""

    async_steps: int = 0
    """0: each step generates, waits for every verdict, then updates. 1: the step that trains batch t first generates
    batch t+1 and starts grading it in the background, then collects t's grades (graded meanwhile) and updates, so
    the judge's time hides behind generation and the update (open-instruct's async_steps, verl's one-step-off-policy
    recipe). The trained batch is one update old; the loss's ratio is taken against the weights that generated it,
    whose clipping bounds the step (docs/rurl.md, the schedule). Larger values are refused: one step of staleness is
    what the clipped ratio was measured to hold here, and it already hides a judge as slow as a step."""
    failure_window: int = 5
    """Judge-failure guard: when the share of unscored completions, or of failed judge verdicts, over the last
    failure_window generation batches of all processes exceeds grading.max_failure_rate (the limit grade and eval
    use too), training stops after saving a checkpoint, instead of optimising on noise."""
    criteria_window: int = 10
    """criteria.json compares each criterion's pass rate over the run's first and latest this many generation
    batches (`moved`); the summary and the report name the criteria that moved most, where a policy learning to
    please its judge shows first."""
    ledger_reask: float = 0.0
    """The criterion ledger's self-agreement (ledger.parquet, docs/criterion-ledger.md): the share of judge verdicts
    asked again afresh (a sample the grading did not use, per criterion), which tells a criterion that separates
    completions from one the judge answers at random. Each costs a judge call; a judge at temperature 0 repeats itself,
    so it measures only a sampling judge. 0: none asked."""
    monitor_judge: bool = False
    """A second judge watches the first: the `monitor` role (endpoint, model and parameters like every role; best a
    different model family from the training judge) grades the in-training evaluation's answers with the same
    rubrics, logged as monitor/... beside eval/..., with monitor/gap (eval minus monitor overall score). Its failures
    are counted (monitor/failed) and never stop training; its calls are the `monitor` role's usage. With it, the
    held-out rows are also evaluated at step 0, before any update: the alarms' baseline. (Not `monitor`: torchrun
    would take --monitor for its own --monitor-interval.)"""
    gold_best: bool | None = None
    """Keep the model of the evaluation where the monitor's held-out score peaked, in output_dir/gold-best (replaced
    at each new peak), and name its step and both judges' scores in the summary (rurl/watch/gold_best.py). None: on with
    monitor_judge; true without monitor_judge is refused."""
    alarm_level: float = 0.05
    """The chance an alarm fires in a run where nothing changes: divergence, a paired bootstrap over the held-out
    examples at this level split over the run's planned evaluations (Bonferroni); grader talk, a two-proportion test
    split over the run's steps. An alarm also needs the size below."""
    monitor_rise: float = 0.05
    """Divergence alarm: the training judge's overall score rose by at least this since step 0 ..."""
    monitor_fall: float = 0.02
    """... while the monitor's fell by at least this; or the gap widened by more than monitor_gap_growth of the first
    gap (and at least monitor_rise)."""
    monitor_gap_growth: float = 1 / 3
    """See monitor_fall."""
    note_rate_rise: float = 0.1
    """Grader-talk alarm: the share of completions the integrity check noted or vetoed rose by at least this between
    the first and the latest criteria_window generation batches (a policy learning to talk to its grader), and
    significantly (alarm_level)."""
    on_alarm: Literal["warn", "stop"] = "warn"
    """warn: a line on stderr, a wandb alert and a record in the summary. stop: the same, then a checkpoint and the
    run ends, exiting non-zero with the line. Every process takes the same decision at the same step."""
    rubric_dropout: float = 0.0
    """Rubric dropout (arXiv 2608.11669): the share of each rubric's positive criteria left out of the reward at a
    step, one mask per prompt group drawn from its id and the step (rurl/reward/dropout.py); never penalties nor
    criteria tagged `protected`; the reward normalized over the kept ones, whose verdicts alone are asked of the judge;
    the full rubric at evaluation. 0: off, so that a run is what its config says; the presets rubrichub-dapo, dapo,
    ruscarl and rler set 0.3 (rar-grpo, hacking-gpu and tiny-cpu 0), with the reason
    (docs/reward-hacking.md#what-to-turn-on)."""
    criterion_advantage: Literal["none", "decoupled", "discriminating"] = "none"
    """How a group's advantages come from its verdicts (rurl/reward/criterion_advantage.py): none, GRPO's of the rubric
    score; decoupled, GDPO's: each criterion normalized within the group, the weighted sum normalized over the batch
    (scale_rewards does not apply); discriminating, weights moved toward the criteria whose verdicts differ within the
    group (POW3R's idea), scaled as scale_rewards says. In these two a vetoed or answerless completion trains below
    every judged one of its group, and dynamic sampling's flat group is one whose advantages are all zero. Not with
    evolve_apply same_step (its regraded groups' verdicts are not the ones kept here)."""
    rubric_dropout_min: int = 1
    """Positive criteria a rubric keeps at least under rubric_dropout (a rubric with fewer is refused when the data
    loads: dropout could never leave it enough)."""
    evolve: bool = False
    """Rubrics that evolve under the policy (RLER, DR Tulu; rurl/evolving/evolution.py): the `evolver` role writes new
    criteria for a query from its group of answers and its current rubric. The original criteria are never removed."""
    evolve_apply: Literal["same_step", "next_draw"] = "same_step"
    """same_step (DR Tulu's training code): a group's new criteria grade that same group before its advantages are
    computed, the step waiting for the calls (at most evolve_deadline); the only mode in which a one-epoch run's
    evolved criteria grade anything. next_draw (open-instruct's RubricManager): the calls run while training goes
    on and the criteria grade the query's next draws: no wait, for runs of many epochs."""
    evolve_every: int = 1
    """Steps between evolution rounds (each round takes the step's generation batches)."""
    evolve_groups: Literal["flat", "all"] = "flat"
    """flat: the groups no criterion split (or whose rewards spread by <= evolve_flat_std); all: every group (RLER)."""
    evolve_flat_std: float = 0.02
    """A group whose rewards spread by no more than this counts as flat."""
    evolve_on_failed: Literal["partial", "none"] = "partial"
    """A flat group whose answers earned nothing: partial asks for criteria that credit steps toward the rubric's
    unmet criteria (the group has no learning signal otherwise); none asks nothing (leaves it to dynamic sampling)."""
    evolve_max_active: int = 5
    """Evolved criteria active per query at most (RLER's max_active_rubrics, 5), held at every moment: a new
    criterion that finds the query full displaces an untested or unsplitting one, never one that split groups."""
    evolve_max_new: int = 3
    """New criteria one evolve call may write."""
    evolve_max_share: float = 0.5
    """The evolved criteria's share of a query's positive points at most: a new positive criterion past it is
    refused, so that evolution never outweighs the original rubric."""
    evolve_retire_window: int = 1
    """An evolved criterion is retired when none of its latest this-many groups (each with two or more decided
    answers) was split by it; 1 is DR Tulu's rule (no reward variance at the current step)."""
    evolve_max_calls: int = 64
    """Evolve calls a step starts at most, over all its dynamic-sampling rounds (a query with a call in flight is
    not asked again)."""
    evolve_answers: int = 8
    """Answers of a group an evolve call sees at most: all of a smaller group, else a sample spread over its
    rewards (the best and the worst included). Each as the judge sees it, reasoning removed."""
    evolve_answer_tokens: int = 1024
    """Each answer the evolver sees is cut to this many tokens (of the policy's tokenizer)."""
    evolve_concurrency: int = 8
    """Evolve calls in flight at most (per run), so that they never hold all of a shared endpoint's slots."""
    evolve_deadline: float = 120.0
    """same_step: seconds a step waits for its evolve calls (the probing of what they wrote included); a group whose
    call is not back by then is graded without new criteria (counted in `timed_out`), its call cancelled."""
    evolve_vet: bool = True
    """Probe each new positive criterion before it is admitted (rurl/evolving/vetting.py): `rubricrl probe`'s kinds that
    need no generation, probe_per_kind texts each, graded as training grades; one that a kind earns more often than
    probe_tolerance allows is refused, with its test in evolve_steps.jsonl. False admits criteria unprobed."""
    evolve_probe_calls: int = 256
    """Judge calls a step's probing of new criteria spends at most: a criterion past it waits, unadmitted, and is
    probed at a later step (evolve/waiting)."""
    judge_deadline: float = 600.0
    """Seconds a generation batch waits for its judge: completions still unjudged then get no score (None, counted
    in rubric/timed_out_rate and by the guard) and their calls are cancelled. The other processes wait for the
    slowest at the next collective, so it must stay within half of ddp_timeout (checked at start-up)."""

    overlong_buffer: int = 0
    """DAPO's soft overlong penalty: the last this many tokens before max_completion_length cost a linearly growing
    penalty, up to overlong_penalty at the limit; 0: off. Applied inside the rubric reward: an unscored completion
    stays unscored."""
    overlong_penalty: float = 1.0
    """The penalty at max_completion_length (DAPO: 1)."""

    preflight: bool = True
    """Before the policy loads, one judge call checks that the judge answers with a verdict."""
    probe_rows: int = 0
    """Before the policy loads, probe this many training rows (a seeded sample) with the training judge: answers
    with no substance built from each row (`rubricrl probe`'s kinds), graded as training grades; 0: off."""
    probe_seed: int = 0
    """The probed sample's seed."""
    probe_per_kind: int = 4
    """Texts per probe kind and row (`rubricrl probe --probes_per_kind`): the counts each kind's test is run on."""
    probe_tolerance: float = 0.1
    """How often an answer with no substance may earn a criterion by chance (`rubricrl probe --tolerance`)."""
    probe_level: float = 0.05
    """The false discovery rate of the exploitable flags (`rubricrl probe --level`)."""
    on_probe: Literal["warn", "stop"] = "warn"
    """When a criterion is exploitable (a probe kind's test flags it) -- warn: a line on stderr and
    probe_preflight.json; stop: the same, then the command ends (exit 2)."""

    @property
    def probe_test(self) -> ProbeTest:
        return ProbeTest(self.probe_tolerance, self.probe_level)

    def __post_init__(self) -> None:
        if self.eval_size < 0 or (self.eval_size >= 1 and self.eval_size != int(self.eval_size)):
            raise ValueError(f"eval_size must be a share in (0, 1), a whole count >= 1 or 0, got {self.eval_size}")
        if self.eval_rubrics is not None and self.eval_size:
            raise ValueError(
                "give eval_rubrics (another dataset to evaluate on) or eval_size (rows held out), not both"
            )
        if self.async_steps not in (0, 1):
            raise ValueError(f"async_steps must be 0 (synchronous) or 1 (one step ahead), got {self.async_steps}")
        for name in ("eval_every", "max_extra_rounds", "overlong_buffer"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.ledger_reask <= 1:
            raise ValueError(
                f"ledger_reask must be within [0, 1] (a share of the judge verdicts), got {self.ledger_reask}"
            )
        if self.eval_max_examples < 1 or self.failure_window < 1 or self.criteria_window < 1:
            raise ValueError("eval_max_examples, failure_window and criteria_window must be at least 1")
        for name in ("dynamic_std_threshold", "prefilter_min_std"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {getattr(self, name)}")
        low_high = self.prefilter_mean_range
        if len(low_high) != 2 or not 0.0 <= low_high[0] <= low_high[1] <= 1.0:
            raise ValueError(f"prefilter_mean_range must be [low, high] with 0 <= low <= high <= 1, got {low_high}")
        for name in ("evolve_every", "evolve_max_active", "evolve_max_new", "evolve_max_calls", "evolve_answers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0 < self.alarm_level < 1:
            raise ValueError(f"alarm_level must be between 0 and 1 (exclusive), got {self.alarm_level}")
        for name in ("evolve_retire_window", "evolve_answer_tokens", "evolve_concurrency", "evolve_probe_calls"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0 < self.evolve_max_share <= 1:
            raise ValueError(f"evolve_max_share must be within (0, 1], got {self.evolve_max_share}")
        if self.evolve_deadline <= 0:
            raise ValueError(f"evolve_deadline must be above 0 (seconds), got {self.evolve_deadline}")
        for name in ("monitor_rise", "monitor_fall", "monitor_gap_growth", "note_rate_rise", "evolve_flat_std"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.on_exhausted not in ("repeat", "stop"):
            raise ValueError(f"on_exhausted must be repeat or stop, got {self.on_exhausted!r}")
        if self.probe_rows < 0 or self.probe_per_kind < 1:
            raise ValueError(
                f"probe_rows must be >= 0 and probe_per_kind >= 1, got {self.probe_rows}, {self.probe_per_kind}"
            )
        test = ProbeTest(self.probe_tolerance, self.probe_level)  # checks both
        if self.evolve and self.evolve_vet and test.tolerance**self.probe_per_kind > test.level:
            raise ValueError(
                f"evolve_vet: {self.probe_per_kind} probe(s) per kind can never refuse a criterion at probe_tolerance "
                f"{test.tolerance:g} and probe_level {test.level:g} (every one crediting it gives p = "
                f"{test.tolerance**self.probe_per_kind:.2g}): raise probe_per_kind"
            )
        if self.judge_deadline <= 0:
            raise ValueError(f"judge_deadline must be above 0 (seconds), got {self.judge_deadline}")
        if self.criterion_advantage not in CRITERION_MODES:
            raise ValueError(
                f"criterion_advantage must be one of {', '.join(CRITERION_MODES)}, got {self.criterion_advantage!r}"
            )
        if self.criterion_advantage != "none" and self.evolve and self.evolve_apply == "same_step":
            raise ValueError("criterion_advantage is not available with evolve_apply same_step; use next_draw")
        if self.gold_best and not self.monitor_judge:
            raise ValueError("gold_best keeps the model of the monitor's peak: it needs monitor_judge: true")
        RubricDropout(self.rubric_dropout, self.rubric_dropout_min)  # its bounds, checked where they are defined
        if self.overlong_penalty < 0:
            raise ValueError(f"overlong_penalty must be >= 0, got {self.overlong_penalty}")
        if self.criterion_advantage != "none" and self.overlong_buffer:
            raise ValueError(
                "criterion_advantage computes advantages from the verdicts alone: the overlong penalty would be lost; "
                "set overlong_buffer 0 (or mask_truncated_completions) or criterion_advantage none"
            )

    @property
    def dropout(self) -> RubricDropout | None:
        return RubricDropout(self.rubric_dropout, self.rubric_dropout_min) if self.rubric_dropout else None


def check_with_trl(
    rurl: RurlConfig,
    grpo: "GRPOConfig",
    reward_funcs: list[str] = (),
    mode: str | None = None,
    verdict_format: str | None = None,
) -> None:
    """The rurl settings that depend on GRPOConfig's (and on the reward functions and the grading mode and verdict
    format), checked once all are parsed (before the dry run prints)."""
    from grading.grader import EXPLICIT_MODES

    if rurl.ledger_reask and (verdict_format == "probability" or (mode is not None and mode not in EXPLICIT_MODES)):
        raise ConfigError(
            f"rurl.ledger_reask asks verdicts again afresh: grading.mode {mode} with verdict_format {verdict_format} "
            "has no fresh verdict to ask (probability reads one deterministic reply; a rating mode has no verdicts)"
        )

    if rurl.criterion_advantage != "none" and mode is not None and mode not in EXPLICIT_MODES:
        raise ConfigError(
            f"rurl.criterion_advantage {rurl.criterion_advantage} needs a verdict per criterion: grading.mode "
            f"{mode} gives one rating; use per_criterion or batched"
        )
    functions = 1 + len(reward_funcs)
    if grpo.reward_weights is not None and len(grpo.reward_weights) != functions:
        raise ConfigError(
            f"reward_weights {grpo.reward_weights}: {len(grpo.reward_weights)} weight(s) for {functions} "
            f"reward function(s) (the rubric reward, then reward_funcs {list(reward_funcs)})"
        )
    if rurl.criterion_advantage == "decoupled" and grpo.scale_rewards in ("none", False):
        raise ConfigError(
            "rurl.criterion_advantage decoupled is GDPO's: each criterion normalized within its group, the sum over "
            "the batch (TRL's normalize_then_sum); scale_rewards none does not apply: leave it at group or batch"
        )
    if rurl.criterion_advantage != "none" and reward_funcs:
        raise ConfigError(
            f"rurl.criterion_advantage {rurl.criterion_advantage}: advantages from the rubric's verdicts alone would "
            f"leave out reward_funcs {list(reward_funcs)}; use one or the other"
        )
    if rurl.overlong_buffer > grpo.max_completion_length:
        raise ConfigError(
            f"rurl.overlong_buffer {rurl.overlong_buffer} is longer than max_completion_length "
            f"{grpo.max_completion_length}: the overlong penalty would start before the first token; "
            "keep the buffer a part of the limit (DAPO: 4096 of 20480)"
        )


def dropout_for_schedule(args, rurl: RurlConfig, grpo: "GRPOConfig") -> None:
    """One step ahead, the loss's ratio is taken against log-probabilities computed when the batch was generated;
    with dropout on, those and the loss's forward draw different masks and the ratio is noise at staleness 0 (a mean
    |log-ratio| of 0.04 per token, 0.14 at most, with LoRA dropout 0.1). So `async_steps: 1` turns dropout off
    (TRL's disable_dropout), and refuses it left on by the user's own `disable_dropout: false`."""
    if not rurl.async_steps or grpo.disable_dropout:
        return
    given = load_yaml(args.config) if args.config else {}
    flags = [arg.lstrip("-").split("=")[0].replace("-", "_") for arg in getattr(args, "trl_argv", [])]
    if "disable_dropout" in given or "disable_dropout" in flags:
        raise ConfigError(
            "rurl.async_steps 1 with disable_dropout false: the ratio of a batch trained a step after it was "
            "generated would compare two dropout masks (noise of 0.04 per token with LoRA dropout 0.1); set "
            "disable_dropout true, or async_steps 0"
        )
    grpo.disable_dropout = True
    print("rurl train: async_steps 1: dropout off (disable_dropout: true), so the ratio is exact", file=sys.stderr)
