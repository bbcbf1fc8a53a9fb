#!/usr/bin/env bash
# Rubric synthesis over N machines with Slurm: an array of N tasks, each serving the model with vLLM on its own
# GPUs (`rubricrl serve`) and synthesizing its shard of the queries (`--shard i/N`: a split by id, independent of
# row order), then one job that merges the shards (`rubricrl merge`) once every task has finished.
#
#   bash experiments/slurm_synth.sh submit N QUERIES OUT CONFIG MODEL [GPUS_PER_TASK (default 1; more: tensor parallel)]
#   e.g. bash experiments/slurm_synth.sh submit 8 queries.parquet runs/rubrics configs/synthesis/rubrichub.yaml \
#            Qwen/Qwen3-8B 1
#
# OUT/shard-<i>/ are the shards, OUT/merged/ the dataset (publish it with `rubricrl publish OUT/merged ...`).
# A task that fails or is preempted is resubmitted with the same command (`sbatch --array=<i> ...` as printed by
# `submit`): its shard resumes where it stopped, from its cache. Run from the repository root, after
# `make setup DEVICE=gpu`. Each task keeps its cache in OUT/home-<i> (file locks on a shared file system are not
# to be trusted); several roles or models: put them in CONFIG (llm.roles) and serve them where the config says.
set -euo pipefail

mode=${1:?usage: $0 submit N QUERIES OUT CONFIG MODEL [GPUS_PER_TASK]}
shift
case "$mode" in
submit)
    n=$1 queries=$2 out=$3 config=$4 model=$5 gpus=${6:-1}
    mkdir -p "$out/logs"
    array=$(sbatch --parsable --array="0-$((n - 1))" --gpus-per-task="$gpus" --ntasks=1 \
        --job-name=rubricrl-synth --output="$out/logs/shard-%a.log" \
        "$0" shard "$n" "$queries" "$out" "$config" "$model" "$gpus")
    # afterany: the merge runs when every task has ended; a shard that did not finish makes it stop with one
    # line naming it (resubmit that task, then run `$0 merge N OUT` by hand)
    merge=$(sbatch --parsable --dependency="afterany:$array" --ntasks=1 --job-name=rubricrl-merge \
        --output="$out/logs/merge.log" "$0" merge "$n" "$out")
    echo "shards: job $array (resubmit one: sbatch --array=<i> --gpus-per-task=$gpus $0 shard $n $queries $out" \
        "$config $model $gpus); merge: job $merge (by hand: rm -rf $out/merged; bash $0 merge $n $out)"
    ;;
shard)
    n=$1 queries=$2 out=$3 config=$4 model=$5 gpus=${6:-1}
    i=${SLURM_ARRAY_TASK_ID:?run through sbatch --array, or set SLURM_ARRAY_TASK_ID}
    export RUBRICRL_HOME="$out/home-$i"
    # a port of this task's own (each array task has its own SLURM_JOB_ID): tasks sharing a node stay apart
    port=$((20000 + ${SLURM_JOB_ID:-$i} % 20000))
    # several GPUs per task: one model split over them (tensor parallelism); for more throughput from a model
    # that fits one GPU, use --replicas "$gpus" instead (each replica gets one GPU; see `rubricrl serve --help`)
    parallel=()
    [ "$gpus" -le 1 ] || parallel=(--vllm-arg=--tensor-parallel-size="$gpus")
    # `rubricrl serve` writes server.json in this task's home once its server answers: a server another job left
    # on the port is never taken for ours (serve exits then, saying the port is taken)
    rm -f "$RUBRICRL_HOME/server.json"
    .venv/bin/rubricrl serve --model "$model" --port "$port" ${parallel[@]+"${parallel[@]}"} &
    server=$!
    trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
    waited=0
    until grep -qs "127.0.0.1:$port/" "$RUBRICRL_HOME/server.json"; do  # vLLM loads the model first
        kill -0 $server 2>/dev/null || { echo "rubricrl serve exited; see $RUBRICRL_HOME/logs" >&2; exit 1; }
        [ "$waited" -lt 1800 ] || { echo "no server on port $port after 30 min; see $RUBRICRL_HOME/logs" >&2; exit 1; }
        sleep 1
        waited=$((waited + 1))
    done
    # exit 1 means some queries failed (listed in errors.jsonl; the shard is finished and merges, and a rerun of
    # the merged folder retries them); any other code is a real failure
    code=0
    .venv/bin/rubricrl synth --config "$config" --input "$queries" --output-dir "$out/shard-$i" \
        --shard "$i/$n" --base-url "http://127.0.0.1:$port/v1" --model "$model" || code=$?
    [ "$code" -le 1 ] || exit "$code"
    ;;
merge)
    n=$1 out=$2
    .venv/bin/rubricrl merge $(for i in $(seq 0 $((n - 1))); do echo "$out/shard-$i"; done) \
        --output-dir "$out/merged"  # a merge that fails writes nothing: fix the cause, run it again
    ;;
*)
    echo "unknown mode $mode: submit, shard or merge" >&2
    exit 2
    ;;
esac
