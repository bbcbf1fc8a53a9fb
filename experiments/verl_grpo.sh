#!/usr/bin/env bash
# RuRL on verl with the rubric reward as a service: RubricHub's own RL recipe (DoYangTan/verl-rubric,
# rubric_scripts/rurbichub_v1_Medical_grpo.sh; the values configs/rurl/rubrichub-dapo.yaml carries to TRL), with
# its reward replaced by `rubricrl reward serve` (our judge settings, cache, failure accounting) through the
# standard-library function experiments/rubric_reward.py.
#
# NOT RUNNABLE HERE: it needs verl (0.9; its own environment, since it pins transformers < 5.11, which rubricrl's
# cannot hold), Ray, vLLM for CUDA and GPUs (the recipe: one node of 8, policy Qwen2.5-7B-Instruct), plus a judge
# server. It has not been run; the values are the recipe's, the wiring is what experiments/rubric_reward.py and
# tests/test_reward_service.py check against the service.
#
#   # 1. the data, in verl's RL parquet (ground_truth = the rubric row id)
#   rubricrl export verl --rubrics rubrics/final.parquet --output data/rubrics/train.parquet
#   rubricrl export verl --rubrics tests/data/healthbench_sample --output data/rubrics/val.parquet --split test
#   # 2. the judge (the recipe: gpt-oss-20b on vLLM) and the reward service beside it, in rubricrl's environment;
#   #    the service must know the rows of both files: give it a dataset holding both, or run one per file
#   CUDA_VISIBLE_DEVICES=7 vllm serve openai/gpt-oss-20b --port 8000 &
#   rubricrl reward serve --config configs/rurl/rubrichub-dapo.yaml --rubrics rubrics/final.parquet &
#   # 3. training, in verl's environment, on the other GPUs
#   NUM_GPUS=7 MODEL_PATH=Qwen/Qwen2.5-7B-Instruct bash experiments/verl_grpo.sh [more hydra overrides]
#
# The service listens on 127.0.0.1:8760; on another node: `--host 0.0.0.0` with RUBRICRL_REWARD_TOKEN set on both
# sides, and RUBRICRL_REWARD_URL=http://that-node:8760 here.
#
# REWARD_MANAGER=dapo (default; the recipe's): verl's DAPO reward manager in the reward loop, which adds the recipe's
# overlong penalty (buffer 4096, factor 1) to the rubric reward, one request per completion (compute_score_async).
# REWARD_MANAGER=batch: one request per batch (compute_score_batch), no overlong penalty.
set -euo pipefail

TRAIN_FILE=${TRAIN_FILE:-data/rubrics/train.parquet}
VAL_FILE=${VAL_FILE:-data/rubrics/val.parquet}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-7B-Instruct}   # recipe (.env.example); the paper: Qwen3-4B/14B-Base after RuFT
MODEL_DTYPE=${MODEL_DTYPE:-bf16}                      # recipe
NUM_GPUS=${NUM_GPUS:-8}
GPU_MEMORY_UTILIZATION=${GPU_MEMORY_UTILIZATION:-0.6} # recipe (.env.example)
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-64}              # recipe: 64 prompts per rollout batch
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-32}        # recipe: mini-batches of 32 prompts, 2 updates per batch
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-4096}          # recipe
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-8192}      # paper (Table 5); the script's .env template says 4096, with
                                                      # which its 4096 overlong buffer penalises every token
ROLLOUT_N=8                                           # recipe
OVERLONG_BUFFER_LEN=4096                              # recipe
OVERLONG_BUFFER_PENALTY_FACTOR=1                      # recipe
CLIP_RATIO_LOW=0.2                                    # recipe
CLIP_RATIO_HIGH=0.28                                  # recipe (DAPO clip-higher)
MAX_TOKENS=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))
REWARD_MANAGER=${REWARD_MANAGER:-dapo}
REWARD_FILE=$(cd "$(dirname "$0")" && pwd)/rubric_reward.py
export RUBRICRL_REWARD_URL=${RUBRICRL_REWARD_URL:-http://127.0.0.1:8760}

case "$REWARD_MANAGER" in
dapo)
    reward=(reward_model.reward_manager=dapo reward_model.use_reward_loop=True
        custom_reward_function.name=compute_score_async
        +reward_model.reward_kwargs.overlong_buffer_cfg.enable=True
        +reward_model.reward_kwargs.overlong_buffer_cfg.len=$OVERLONG_BUFFER_LEN
        +reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=$OVERLONG_BUFFER_PENALTY_FACTOR
        +reward_model.reward_kwargs.overlong_buffer_cfg.log=False
        +reward_model.reward_kwargs.max_resp_len=$MAX_RESPONSE_LENGTH) ;;
batch)  # the legacy manager: current verl turns the reward loop on by default (reward_model/dp_reward_loop.yaml),
        # and the loop's registry has no `batch` ("Unknown reward manager: batch", reward_loop/reward_manager/registry.py)
    reward=(reward_model.reward_manager=batch reward_model.use_reward_loop=False
        custom_reward_function.name=compute_score_batch) ;;
*)
    echo "REWARD_MANAGER must be dapo or batch, got $REWARD_MANAGER" >&2
    exit 2 ;;
esac

# Fail before Ray starts when the service is not up (the reward function would fail at the first batch).
python3 -c "import json, os, urllib.request; print('reward service:', json.load(urllib.request.urlopen(
    os.environ['RUBRICRL_REWARD_URL'] + '/health', timeout=10)))" || {
    echo "no rubric reward service at $RUBRICRL_REWARD_URL: start \`rubricrl reward serve --rubrics ...\`" >&2
    exit 1
}

set -x
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    data.train_files="$TRAIN_FILE" \
    data.val_files="$VAL_FILE" \
    data.train_batch_size="$TRAIN_BATCH_SIZE" \
    data.max_prompt_length="$MAX_PROMPT_LENGTH" \
    data.max_response_length="$MAX_RESPONSE_LENGTH" \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    data.return_raw_chat=True \
    "${reward[@]}" \
    reward_model.num_workers=1 \
    custom_reward_function.path="$REWARD_FILE" \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.optim.lr_warmup_steps=10 \
    actor_rollout_ref.actor.fsdp_config.model_dtype="$MODEL_DTYPE" \
    actor_rollout_ref.actor.fsdp_config.param_offload=True \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=True \
    actor_rollout_ref.actor.use_dynamic_bsz=True \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$MAX_TOKENS \
    actor_rollout_ref.actor.ppo_mini_batch_size="$PPO_MINI_BATCH_SIZE" \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.kl_loss_coef=0 \
    actor_rollout_ref.actor.clip_ratio_low=$CLIP_RATIO_LOW \
    actor_rollout_ref.actor.clip_ratio_high=$CLIP_RATIO_HIGH \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agent \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEMORY_UTILIZATION" \
    actor_rollout_ref.rollout.prompt_length="$MAX_PROMPT_LENGTH" \
    actor_rollout_ref.rollout.response_length="$MAX_RESPONSE_LENGTH" \
    actor_rollout_ref.rollout.max_model_len=$MAX_TOKENS \
    actor_rollout_ref.rollout.max_num_batched_tokens=$MAX_TOKENS \
    actor_rollout_ref.rollout.n=$ROLLOUT_N \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.top_p=1.0 \
    actor_rollout_ref.rollout.top_k=-1 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=False \
    actor_rollout_ref.rollout.val_kwargs.temperature=0 \
    actor_rollout_ref.rollout.val_kwargs.n=1 \
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$MAX_TOKENS \
    actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=$MAX_TOKENS \
    actor_rollout_ref.ref.fsdp_config.model_dtype="$MODEL_DTYPE" \
    actor_rollout_ref.ref.fsdp_config.param_offload=True \
    trainer.critic_warmup=0 \
    trainer.logger="['console','wandb']" \
    trainer.project_name=rubricrl-verl \
    trainer.experiment_name=rubrichub-grpo-service \
    trainer.n_gpus_per_node="$NUM_GPUS" \
    trainer.nnodes=1 \
    trainer.save_freq=10 \
    trainer.test_freq=5 \
    trainer.total_epochs=15 \
    "$@"
