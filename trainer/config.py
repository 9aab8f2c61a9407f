"""Typed configuration of a training run (`python -m trainer fit --config FILE --set k=v`).

One pydantic model per concern, composed in `TrainConfig`; every model forbids unknown
fields, so a typo fails before any work starts and the message names the dotted field.
`recipe` picks the training loop (trainer.recipes); each recipe reads its own section
(`loss` and `curriculum` for sad, `dpo` for dpo) and a section of another recipe is refused.

The YAML loading and `key=value` override helpers mirror datagen/config.py on purpose: the top
level is fixed (DESIGN.md) and training never imports the generation side, so the few lines
are kept twice rather than shared through a package both would depend on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError,
                      field_validator, model_validator)

from datagen.teachers.config import MAX_IN_FLIGHT, Temperature

from datagen.config_files import ConfigError, parse_override, read_yaml, set_dotted, shape_problem
from datagen.config_model import ConfigModel
from trainer.pair_weights import KindWeights, check_kind_weights


class StrictModel(ConfigModel):
    # no inf / nan anywhere: a learning rate, weight or reward of inf trains on NaN; no
    # true/false for a number (datagen/config_model.py)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Upper bounds on what sizes memory or a loop: far past any real run (a 128k context, a
# thousand-document micro-batch), low enough that a typo fails before Ray starts instead of
# allocating it. (datagen's config has its own, for the same reason.)
MAX_TOKENS = 1 << 20
MAX_BATCH = 65_536
MAX_TURNS = 256  # assistant turns per episode: the longest gold solution is ~10 calls
MAX_NEW_TOKENS = 32_768  # tokens per generated turn: longer than any context here
MAX_SEED = 2**63 - 1  # seeds travel as int64
MAX_COUNT = 2**31 - 1  # steps, checkpoints, windows, layers, CPUs: a C int (2^31 steps of 0.1 s
# are ~7 years), so no value overflows where torch, numpy or Ray keep it
MAX_WORKERS = 100_000  # Ray workers or actors of one kind, a placement-group bundle each

# Upper bounds on the floats that scale a step, a loss or a reward (the walk in
# tests/trainer/test_config.py finds every float field and checks it has one). inf and nan are
# refused already; these refuse finite values no run means (`optim.lr: 1e300` trained on NaN).
# AdamW moves every weight by about lr per step whatever the gradient's scale, and a
# transformer's weights are ~0.02-1: lr 1 rewrites each weight by its own size every step
# (fine-tuning uses 1e-6..1e-3, this repo's tiny runs 3e-3).
MAX_LR = 1.0
# Loss weights and coefficients only matter as ratios to each other (Adam undoes the
# gradient's overall scale): a ratio of a million already mutes the other terms, and a weight
# of 1e6 times a loss of ~10 stays far inside float32 (and bf16) range.
MAX_LOSS_WEIGHT = 1e6
MIN_TABLE_WEIGHT = 1e-6  # a table weighted less trains on nothing (1e-300 is 0 in float32)
# Rewards are in units the episode sums (success 1, penalties 0.05-0.5 a turn); GAE squares
# returns in the value loss, so 1e6 x 256 turns, squared, is still ~1e17, finite in float32.
MAX_REWARD = 1e6

# Every integer field has an upper bound (tests/trainer/test_config.py walks the models to
# check). These types carry the shared ones; a field keeps its own lower bound, and a type
# carries none, because pydantic applies only the last of two `ge`s.
Count = Annotated[int, Field(le=MAX_COUNT)]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
AdamBeta = Annotated[float, Field(ge=0, lt=1)]  # torch.optim refuses others, in the worker
LossWeight = Annotated[float, Field(le=MAX_LOSS_WEIGHT)]  # a dict's values; its validator
# refuses <= 0 (or < 0) with a message that says what to do instead
PathText = Annotated[str, Field(min_length=1)]  # "" resolves to the working directory, or
# (run_dir) to a storage URI Ray cannot parse


def _not_a_uri(path: str | None) -> str | None:
    """A field read as a filesystem path: a URI there became a relative directory named
    `s3:` (run_dir), or "no checkpoint in s3://KEY:SECRET@..." with the secret printed back
    (model.init_from); refused naming the scheme only, never the value."""
    from trainer.shard_files import is_uri, shown  # pyarrow: only when validated

    if path is not None and is_uri(path):
        scheme = shown(path.split("://", 1)[0])[:40]
        raise ValueError(f"a filesystem path is expected here, not a URI ({scheme}://...); on "
                         f"a multi-node cluster, a path on a filesystem every node shares")
    return path


def _readable_location(location: str | None) -> str | None:
    """A path, or s3:// / file:// without credentials, query or fragment
    (trainer.shard_files.location_problem): credentials would be recorded in training.json, a
    query's endpoint_override would send the AWS environment's credentials to its host, gs://
    retries for minutes."""
    from trainer.shard_files import location_problem  # pyarrow: only when validated

    if location is not None and (problem := location_problem(location)):
        raise ValueError(problem)
    return location


LocalPath = Annotated[PathText, AfterValidator(_not_a_uri)]  # checkpoints, run_dir, tokenizer
StoreLocation = Annotated[PathText, AfterValidator(_readable_location)]  # shards, reference_dir


ModelT = TypeVar("ModelT", bound=BaseModel)


class ModelConfig(StrictModel):
    builder: Literal["tiny", "small", "qwen2_5_1_5b", "qwen2_5_32b"] | None = Field(
        "tiny", description="random-init shape from trainer.model.builders (ignored with init_from)")
    init_from: LocalPath | None = Field(None, description="local HF checkpoint (any Qwen2/"
                                        "Qwen2.5 or one of ours) to start from instead of random "
                                        "weights, or a run directory (its newest checkpoint when "
                                        "the run starts)")
    split_embeddings: bool = Field(True, description="second embedding for tool-call tokens")
    use_landmark: bool = Field(False, description="landmark attention (grouped softmax)")
    landmark_block_size: int = Field(64, ge=1, le=MAX_TOKENS,
                                     description="tokens per landmark block")
    landmark_retrieval_topk: Count = Field(4, ge=1,
                                           description="blocks opened per query when decoding")
    use_mch: bool = Field(True, description="meta-cognitive head (needs OUT/negatives to learn)")
    mch_detach_backbone: bool = Field(True, description="MCH loss leaves the backbone alone")
    train_layers: Count | None = Field(None, ge=0, description="train only the top N decoder "
                                       "layers (+ final norm and MCH); embeddings, head and the "
                                       "layers below stay frozen, so backward stops at layer "
                                       "L-N: for a pretrained start on CPU (null = train all)")
    gradient_checkpointing: bool = Field(False, description="recompute layers in backward: "
                                         "~30% more compute for activation memory ~1 layer")
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="weights dtype "
                                                  "(bf16 on GPU; CPU runs use float32)")


class DataConfig(StrictModel):
    max_seq_len: int = Field(2048, ge=16, le=MAX_TOKENS,
                             description="longer documents keep their prefix")
    batch_size: int = Field(4, ge=1, le=MAX_BATCH,
                            description="LM documents (trajectories, repairs) per "
                            "micro-batch per worker; every micro-batch has LM loss")
    mch_rows: int = Field(1, ge=0, le=MAX_BATCH,
                          description="MCH negatives added to every micro-batch "
                          "(model.use_mch): rows of LM weight 0, each costing a forward and "
                          "backward like an LM row; 0 = the MCH learns only from in-row labels "
                          "(tool calls of LM documents, repairs' wrong calls)")
    bucket_pool_batches: int = Field(8, ge=1, le=4096, description="batches composed and sorted by "
                                     "length together; larger = less padding, less randomness")
    tables: tuple[Literal["trajectories", "repairs", "safety"], ...] = Field(
        ("trajectories",), min_length=1, description="tables trained with the LM loss; "
        "repairs (critique REASON + fixed ACT, the wrong call an ERROR span without loss) "
        "are read from repairs/ beside the trajectory shards of the same chunk; safety = "
        "the chosen side of the `safety` preference pairs (refusal / confirmation, or the "
        "benign call) as SFT documents, prompt without loss (trainer/readers/safety.py)")
    table_weights: dict[Literal["trajectories", "repairs", "safety"], LossWeight] = Field(
        default_factory=dict, description="LM loss weight of a table's tokens (default 1): "
        "span means become sum(w * loss) / sum(w); every row is read once per epoch "
        "whatever its weight, so this is a loss weight, not a sampling share")
    packing: bool = Field(False, description="lay a micro-batch's documents into as few rows "
                          "of max_seq_len as fit (per-document positions and attention) "
                          "instead of one padded row each; needs model.use_landmark false; "
                          "the MCH scores the first document of each row only")
    check_tokenizer: bool = Field(True, description="refuse shards whose token ids (input_ids, "
                                  "teacher top-k) were made with another tokenizer than ours, "
                                  "as recorded in their `tokenizer` column")
    # `auto` by default, not `all`: an OUT has a consistency table only when its run turned
    # the filter on, i.e. someone asked for the discarded rollouts not to be trained on; `all`
    # as the default silently trained on them (80-90% of a weak teacher's rollouts, README
    # "Consistency filter"). Not `kept_only`: every OUT written without the filter would be
    # refused. `kept_only` is there to fail loudly when the table is expected but missing.
    consistency: Literal["auto", "kept_only", "all"] = Field(
        "auto", description="rows read from an OUT written with the consistency filter "
        "(consistency/ table): auto = only the rollouts it kept when the table exists, every "
        "row otherwise; kept_only = the same, refused without the table; all = every rollout. "
        "Repairs and preference pairs of dropped rollouts are dropped with them (safety pairs "
        "are kept); sad and dpo read it")

    @model_validator(mode="after")
    def _tables(self) -> "DataConfig":
        if len(set(self.tables)) != len(self.tables):
            raise ValueError(f"tables lists a table twice: {list(self.tables)}")
        unused = sorted(set(self.table_weights) - set(self.tables))
        if unused:
            raise ValueError(f"table_weights names {unused}, not in tables {list(self.tables)}")
        # 1e-300 passed "> 0" and became 0 in float32: the table read, trained on nothing
        too_small = sorted(name for name, weight in self.table_weights.items()
                           if weight < MIN_TABLE_WEIGHT)
        if too_small:
            raise ValueError(f"table_weights of {too_small} must be >= {MIN_TABLE_WEIGHT:g} "
                             f"(drop the table from tables instead)")
        return self


class LossConfig(StrictModel):
    objective: Literal["sad", "token_kd", "sft"] = Field("sad", description="sad = span-level "
                                                         "KD; token_kd / sft are the baselines")
    teacher: Literal["onehot", "topk", "online"] = Field("onehot", description="onehot for "
                                                         "scripted teachers; topk reads stored "
                                                         "logprobs; online runs teacher_model")
    teacher_model: LocalPath | None = Field(None, description="HF checkpoint of the online teacher")
    lambda_reason: float = Field(1.0, ge=0, le=MAX_LOSS_WEIGHT)
    lambda_act: float = Field(1.0, ge=0, le=MAX_LOSS_WEIGHT)
    temperature: Temperature = Field(1.0, gt=0)  # <= 100: datagen's sane_temperature
    chunk_size: int = Field(512, ge=1, le=MAX_TOKENS, description="time steps per logits chunk")
    recompute_chunks: bool | None = Field(None, description="recompute chunk logits in "
                                          "backward (memory for one extra head matmul); "
                                          "null = only when full logits exceed 2 GiB")
    pcgrad: bool = Field(False,
                         description="project conflicting REASON/ACT gradients (2 backward passes)")
    mch_weight: float = Field(0.5, ge=0, le=MAX_LOSS_WEIGHT,
                              description="weight of the MCH binary loss (class-"
                              "balanced: mean over correct steps and mean over wrong ones, "
                              "averaged)")

    @model_validator(mode="after")
    def _teacher_model(self) -> "LossConfig":
        if self.teacher == "online" and not self.teacher_model:
            raise ValueError("teacher 'online' needs teacher_model")
        return self

    def trains_nothing(self, use_mch: bool) -> bool:
        """Whether every term of the sad objective is weighted 0: the loss is 0 at every
        step, and a run would report max_steps of training that moved no weight."""
        lm_terms = self.objective != "sad" or self.lambda_reason > 0 or self.lambda_act > 0
        return not lm_terms and not (use_mch and self.mch_weight > 0)


PreferenceSource = Literal["negative", "repair", "safety"]


class DPOConfig(StrictModel):
    """The DPO recipe (trainer/recipes/dpo.py) on preferences/ pairs."""

    loss_type: Literal["sigmoid", "ipo"] = Field("sigmoid", description="sigmoid = DPO; ipo = "
                                                 "IPO with TRL's length normalisation")
    # beta 100 turns a log-prob gap of 0.1 nats into a sigmoid argument of 10: a step
    # function of the gap, past any DPO or IPO setting (0.01-1)
    beta: float = Field(0.1, gt=0, le=100, description="strength of the pull to the reference "
                        "(IPO: its tau); rewards are beta * (logp - ref_logp)")
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, description="sigmoid only: probability "
                                   "that a pair's label is wrong (conservative DPO); 0 = DPO")
    rpo_alpha: float = Field(0.0, ge=0, le=MAX_LOSS_WEIGHT,
                             description="weight of an NLL term on the chosen "
                             "completions (RPO; TRL's 'sft' loss added); 0 = off")
    sources: tuple[PreferenceSource, ...] = Field(
        ("negative", "repair", "safety"), min_length=1, description="pair sources trained "
        "(a filter on the `source` column)")
    source_weights: dict[PreferenceSource, LossWeight] = Field(
        default_factory=dict, description="loss weight per source (default 1): pair losses "
        "average as sum(w * loss) / sum(w); a loss weight, not a sampling share")
    kind_weights: dict[str, LossWeight] = Field(
        default_factory=dict, description="loss weight per pair kind: glob pattern -> weight "
        ">= 0 (`benign_*: 3`), first match in the order written, unmatched kinds 1; scales the "
        "pair's loss absolutely (trainer.pair_weights), 0 drops the kind from the feed")
    batch_size: int = Field(4, ge=1, le=MAX_BATCH,
                            description="pairs per micro-batch per worker (2x as "
                            "many rows: chosen and rejected share one forward)")
    bucket_pool_batches: int = Field(8, ge=1, le=4096, description="batches composed and sorted by "
                                     "length together; larger = less padding, less randomness")
    reference: Literal["model", "precomputed"] = Field(
        "model", description="model = a frozen copy of the starting weights runs forward "
        "each step (small models); precomputed = reference log-probs computed once in a Ray "
        "Data pass and stored as Parquet beside the data, so the job holds one model (32B)")
    reference_model: LocalPath | None = Field(None, description="reference checkpoint; default "
                                              "model.init_from (the weights DPO starts from)")
    reference_dir: StoreLocation | None = Field(
        None, description="where precomputed log-probs live: a path, s3:// or file:// (the rule "
        "of shards); default SHARDS/reference_logps/<key of reference, tokenizer, max_seq_len, "
        "sources, shards>")
    reference_batch_size: int = Field(8, ge=1, le=MAX_BATCH, description="pairs per forward in the "
                                      "precompute pass")
    reference_workers: int = Field(1, ge=1, le=MAX_WORKERS, description="Ray Data actors of "
                                   "the precompute pass, each holding the reference model")
    reference_gpus: float = Field(0.0, ge=0, le=MAX_COUNT, description="GPUs per precompute "
                                  "actor (0 = CPU)")
    chunk_size: int = Field(512, ge=1, le=MAX_TOKENS, description="time steps per logits chunk")
    recompute_chunks: bool | None = Field(None, description="recompute chunk logits in "
                                          "backward; null = only when full logits exceed 2 GiB")
    mch_weight: float = Field(0.5, ge=0, le=MAX_LOSS_WEIGHT,
                              description="weight of the MCH loss on the pairs' "
                              "calls (chosen call = correct step, rejected call = wrong one)")
    anchor_weight: float = Field(0.0, ge=0, le=MAX_LOSS_WEIGHT,
                                 description="weight of a SAD loss on trajectory "
                                 "micro-batches added to every DPO step (PPO-ptx style: it keeps "
                                 "the agent the pairs alone would cost); 0 = off. The anchor "
                                 "stream reads the data section (tables, table_weights, mch_rows, "
                                 "bucket_pool_batches, packing) "
                                 "and the loss section as recipe 'sad' does")
    anchor_batch_size: int = Field(2, ge=1, le=MAX_BATCH, description="trajectories per anchor "
                                   "micro-batch per worker (recipe sad's data.batch_size)")

    @field_validator("kind_weights")
    @classmethod
    def _kind_weights(cls, weights: dict[str, float]) -> dict[str, float]:
        return check_kind_weights(weights)

    @model_validator(mode="after")
    def _checks(self) -> "DPOConfig":
        if len(set(self.sources)) != len(self.sources):
            raise ValueError(f"sources lists a source twice: {list(self.sources)}")
        unused = sorted(set(self.source_weights) - set(self.sources))
        if unused:
            raise ValueError(f"source_weights names {unused}, not in sources {list(self.sources)}")
        if any(weight <= 0 for weight in self.source_weights.values()):
            raise ValueError("source_weights must be > 0 (drop the source from sources instead)")
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise ValueError("label_smoothing applies to loss_type 'sigmoid' only")
        return self

    def weight(self, source: str) -> float:
        return self.source_weights.get(source, 1.0)

    def kind_weight_items(self) -> KindWeights:
        return tuple(self.kind_weights.items())


CALL_CLASSES = ("truncated", "unparsable", "unknown_tool", "hallucinated_key", "type_error",
                "missing_required", "constraint", "malformed", "tool_error")


class RewardConfig(StrictModel):
    """Reward weights of the `ppo` recipe (trainer.rl.rewards defines the error classes)."""

    success: float = Field(1.0, ge=-MAX_REWARD, le=MAX_REWARD,
                           description="reward when the checker accepts the final answer")
    turn_cost: float = Field(0.01, ge=0, le=MAX_REWARD,
                             description="subtracted per assistant turn: prefers "
                             "short solutions; keep it well under the success reward")
    penalties: dict[str, Annotated[float, Field(le=MAX_REWARD)]] = Field(
        default_factory=lambda: {"truncated": 0.5, "unparsable": 0.5, "unknown_tool": 0.5,
                                 "hallucinated_key": 0.3, "type_error": 0.3,
                                 "missing_required": 0.3, "constraint": 0.2, "malformed": 0.3,
                                 "tool_error": 0.05},
        description="subtracted per turn for each error class it shows (" +
        ", ".join(CALL_CLASSES) + "); a class left out costs 0")

    @model_validator(mode="after")
    def _classes(self) -> "RewardConfig":
        unknown = sorted(set(self.penalties) - set(CALL_CLASSES))
        if unknown:
            raise ValueError(f"penalties names unknown error classes {unknown}; known: "
                             f"{list(CALL_CLASSES)}")
        if any(value < 0 for value in self.penalties.values()):
            raise ValueError("penalties must be >= 0 (they are subtracted)")
        return self


class PPOConfig(StrictModel):
    """The PPO recipe (trainer/recipes/ppo.py): the policy plays tasks, rewards come from the
    environments and the schema. run.max_steps counts iterations (rollouts + updates)."""

    advantage: Literal["gae", "grpo", "rloo"] = Field(
        "gae", description="gae = PPO with a value head (GAE over generated tokens); grpo / "
        "rloo = critic-free: group baseline over group_size rollouts of each task (cheaper; "
        "no value head trained)")
    envs: tuple[str, ...] = Field(("sql", "fs", "enterprise"), min_length=1,
                                  description="environments the training tasks come from")
    task_seed: Seed = Field(0, description="TaskSource seed of the training tasks (the "
                            "generation task space; held-out evaluation tasks never overlap)")
    tasks_per_iteration: int = Field(4, ge=1, le=MAX_BATCH,
                                     description="distinct tasks per iteration per "
                                     "worker")
    group_size: int = Field(2, ge=1, le=1024,
                            description="rollouts per task (grpo/rloo need >= 2: the "
                            "baseline is the group's other rollouts)")
    rollout_workers: int = Field(1, ge=1, le=MAX_WORKERS, description="rollout actors per "
                                 "learner worker, each holding a copy of the policy")
    rollout_cpus: float = Field(1.0, gt=0, le=MAX_COUNT, description="CPUs reserved per "
                                "rollout actor")
    temperature: Temperature = Field(1.0, gt=0, description="sampling temperature of rollouts; the "
                               "learner scores tokens at the same temperature")
    max_turns: int = Field(6, ge=1, le=MAX_TURNS, description="assistant turns per episode")
    max_tokens_per_turn: int = Field(128, ge=1, le=MAX_NEW_TOKENS,
                                     description="token budget per turn (a turn "
                                     "that hits it is truncated: penalised)")
    on_invalid_turn: Literal["stop", "feedback"] = Field(
        "stop", description="stop = a malformed turn ends the episode (as trainer eval plays); "
        "feedback = the error is shown and the policy may recover")
    epochs: int = Field(2, ge=1, le=1000, description="passes over each iteration's rollouts")
    minibatch_size: int = Field(4, ge=1, le=MAX_BATCH, description="episodes per optimizer step")
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount per generated token")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda")
    # the ratio is clipped to [1 - clip_ratio, 1 + clip_ratio] (0.1-0.3 in practice): past 10
    # the clip never acts on a step that has not diverged already
    clip_ratio: float = Field(0.2, gt=0, le=10,
                              description="PPO clip range of the probability ratio")
    value_clip: float = Field(0.2, ge=0, le=MAX_REWARD, description="clip range of the value "
                              "update, in reward units (0 = unclipped value loss)")
    value_coef: float = Field(0.5, ge=0, le=MAX_LOSS_WEIGHT, description="weight of the value loss")
    entropy_coef: float = Field(0.0, ge=0, le=MAX_LOSS_WEIGHT,
                                description="weight of the entropy bonus")
    kl_coef: float = Field(0.05, ge=0, le=MAX_LOSS_WEIGHT,
                           description="weight of the KL to the reference (the "
                           "starting weights); 0 = no reference model")
    kl_estimator: Literal["k1", "k3"] = Field("k1", description="k1 = log p - log p_ref "
                                              "(unbiased, can be negative); k3 = "
                                              "exp(d) - d - 1, d = log p_ref - log p (>= 0, "
                                              "lower variance)")
    kl_in: Literal["reward", "loss"] = Field("reward", description="reward = per-token KL "
                                             "penalty folded into the rewards (classic PPO); "
                                             "loss = a KL term added to the loss (GRPO)")
    whiten_advantages: bool = Field(True, description="gae: normalise advantages over each "
                                    "iteration's generated tokens (mean 0, std 1); grpo/rloo "
                                    "keep their group advantages as they are")
    chunk_size: int = Field(256, ge=1, le=MAX_TOKENS,
                            description="time steps per logits chunk when scoring")
    reward: RewardConfig = Field(default_factory=RewardConfig)

    @model_validator(mode="after")
    def _group(self) -> "PPOConfig":
        if self.advantage in ("grpo", "rloo") and self.group_size < 2:
            raise ValueError(f"advantage {self.advantage!r} needs group_size >= 2 (the "
                             f"baseline is the other rollouts of the same task)")
        # the rollouts play them all at once: datagen's batch and episodes-in-flight bound
        if (episodes := self.tasks_per_iteration * self.group_size) > MAX_IN_FLIGHT:
            raise ValueError(f"tasks_per_iteration x group_size = {episodes:,} episodes in "
                             f"flight per worker, more than {MAX_IN_FLIGHT:,} (each holds an "
                             f"environment, all in one forward pass)")
        return self


# a complexity score's weights, either sign: terms of ~1-10 each, so +-1e6 keeps the score finite
ScoreWeight = Annotated[float, Field(ge=-MAX_LOSS_WEIGHT, le=MAX_LOSS_WEIGHT)]


class CurriculumConfig(StrictModel):
    enabled: bool = False
    start_fraction: float = Field(0.3, gt=0, le=1, description="easiest share used at step 0")
    ramp_fraction: float = Field(0.5, ge=0, le=1,
                                 description="share of training until all data is in")
    schedule: Literal["linear", "root"] = "linear"
    weights: tuple[ScoreWeight, ScoreWeight, ScoreWeight] = Field(
        (1.0, 1.0, 1.0), description="steps, assistant tokens/1000, teacher entropy")


class OptimConfig(StrictModel):
    lr: float = Field(1e-3, gt=0, le=MAX_LR, description="peak learning rate of AdamW, at "
                      "most 1 (AdamW moves each weight by ~lr a step); a step whose gradient "
                      "norm is inf or nan stops the run")
    # AdamW multiplies every weight by (1 - lr * weight_decay) each step: 0-0.1 in practice;
    # the product is checked below
    weight_decay: float = Field(0.0, ge=0, le=10)
    betas: tuple[AdamBeta, AdamBeta] = (0.9, 0.95)
    warmup_steps: Count = Field(5, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine decays to lr * this")
    # a norm of 1e6 is never reached by a step that has not diverged already: as a clip it
    # is no clip, which 0 says
    grad_clip: float = Field(1.0, ge=0, le=1e6, description="max gradient norm; 0 = no clipping")

    @model_validator(mode="after")
    def _decay(self) -> "OptimConfig":
        if self.lr * self.weight_decay >= 1:
            raise ValueError(f"lr * weight_decay = {self.lr * self.weight_decay:g}: AdamW "
                             f"multiplies the weights by 1 - that each step (zero or sign-"
                             f"flipped); keep it well under 1")
        return self


class RunConfig(StrictModel):
    max_steps: Count = Field(40, ge=1,
                             description="optimizer steps (a resumed run continues to this)")
    save_every: Count = Field(0, ge=0, description="checkpoint every N steps (0 = only at the end)")
    keep_checkpoints: Count = Field(2, ge=1)
    max_failures: int = Field(0, ge=0, le=100, description="times Ray Train restarts the "
                              "worker group after a worker dies (killed, OOM, its node lost; "
                              "preemptions the cloud announces count apart, in Ray's "
                              "max_preemption_failures): each restart resumes from the latest "
                              "checkpoint, so save_every bounds the steps trained again; "
                              "0 = a dead worker fails the job. Bad data, a diverged step and "
                              "non-finite weights end the run at once (a restart would fail "
                              "the same way)")
    seed: Seed = 0
    progress: bool | None = Field(None, description="progress bars on the driver's console "
                                  "(the train loop's and Ray Data's); unset: on when the "
                                  "driver's stderr is a terminal, off in a log file (`ray job "
                                  "submit`, a pipe), where each redraw would be a line")
    worker_tracebacks: bool = Field(False, description="print the Ray workers' Python "
                                    "traceback frames on the console (false: each process's "
                                    "lines and each exception's own line; the frames stay in "
                                    "Ray's logs, and a failed run says where)")
    mch_auroc_window: Count = Field(512, ge=2, description="labelled MCH steps behind the "
                                    "running AUROC logged in metrics.jsonl (mch_auroc); each is "
                                    "scored before the step trains on it")


class ScalingConfig(StrictModel):
    num_workers: int = Field(1, ge=1, le=MAX_WORKERS)
    cpus_per_worker: Count = Field(1, ge=1, description="leave CPUs for Ray Data: 2 workers "
                                   "x 1 CPU on a 2-CPU machine starve the parquet reader")
    use_gpu: bool = False
    strategy: Literal["ddp", "deepspeed"] = "ddp"
    deepspeed_config: LocalPath | None = Field(None,
                                               description="DeepSpeed JSON (strategy deepspeed)")
    worker_start_timeout_s: float = Field(
        600.0, gt=0, le=86_400, description="longest wait for the cluster to place the "
        "workers (an autoscaler adding a node, another job ending), at the start and at each "
        "restart (and for PPO's rollout actors to start, their policy copies built); then "
        "the fit fails naming what scaling asks for and what the cluster has. "
        "Longer for slow autoscalers, shorter to fail fast on a fixed cluster; a request the "
        "cluster can never hold is refused at once (trainer/placement.py)")

    @model_validator(mode="after")
    def _deepspeed(self) -> "ScalingConfig":
        if self.strategy == "deepspeed" and not self.deepspeed_config:
            raise ValueError("strategy 'deepspeed' needs deepspeed_config")
        return self


# what the DPO anchor's trajectory stream reads of the data section (not batch_size: its own
# is dpo.anchor_batch_size)
ANCHOR_DATA_FIELDS = ("tables", "table_weights", "mch_rows", "bucket_pool_batches", "packing")
RECIPE_SECTIONS = {"sad": ("loss", "curriculum"), "dpo": ("dpo",), "ppo": ("ppo",)}


class TrainConfig(StrictModel):
    recipe: Literal["sad", "dpo", "ppo"] = Field("sad", description="training loop: sad = "
                                                 "span-level distillation (loss, curriculum); "
                                                 "dpo = preference training on preferences/ "
                                                 "(dpo); ppo = RL in the environments (ppo)")
    run_dir: LocalPath = Field(..., description="checkpoints, metrics.jsonl and Ray's run state; "
                          "rerunning into it resumes. Multi-node: a path every node can reach")
    shards: StoreLocation | None = Field(None, description="dataset OUT root (trajectories/, "
                                    "preferences/, repairs/); required by sad and dpo, unused by "
                                    "ppo (it writes its rollouts under run_dir/rollouts)")
    tokenizer: LocalPath = Field(..., description="tokenizer directory "
                                 "(scripts/build_tokenizer.py)")
    ray_address: str | None = Field(None, description="Ray to join; default $RAY_ADDRESS or local")
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    dpo: DPOConfig = Field(default_factory=DPOConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    scaling: ScalingConfig = Field(default_factory=ScalingConfig)

    @property
    def anchored(self) -> bool:
        """A DPO run with a trajectory anchor (it reads the data and loss sections too)."""
        return self.recipe == "dpo" and self.dpo.anchor_weight > 0

    @model_validator(mode="after")
    def _some_loss(self) -> "TrainConfig":
        if self.recipe == "sad" and self.loss.trains_nothing(self.model.use_mch):
            raise ValueError("loss.lambda_reason and loss.lambda_act are both 0 and there is "
                             "no MCH loss (model.use_mch with loss.mch_weight > 0): every "
                             "step's loss would be 0; set one of them above 0")
        return self

    @model_validator(mode="after")
    def _recipe_sections(self) -> "TrainConfig":
        # A section of another recipe that differs from its defaults would be ignored
        # silently; an all-default one (e.g. from a full dump of the config) is harmless.
        read = set(RECIPE_SECTIONS[self.recipe]) | ({"loss"} if self.anchored else set())
        foreign = [section for sections in RECIPE_SECTIONS.values() for section in sections
                   if section not in read
                   if getattr(self, section) != type(self).model_fields[section].default_factory()]
        if foreign:
            raise ValueError(f"section {foreign[0]!r} belongs to another recipe than "
                             f"{self.recipe!r}; remove it or set recipe")
        return self

    @model_validator(mode="after")
    def _dpo(self) -> "TrainConfig":
        if self.recipe != "dpo":
            return self
        # the anchor stream reads the data section as recipe 'sad' does, but its batch size
        # from dpo.anchor_batch_size: data.batch_size is read by neither stream
        self._refuse_sad_data_fields(
            "reads dpo.batch_size, dpo.bucket_pool_batches: pairs, and dpo.anchor_batch_size: "
            "the anchor's trajectories"
            + ("" if self.anchored else "; set dpo.anchor_weight for a trajectory anchor"),
            read=ANCHOR_DATA_FIELDS if self.anchored else ())
        if self.anchored:
            if self.scaling.strategy == "deepspeed":
                raise ValueError("dpo.anchor_weight adds a second backward pass to each step; "
                                 "not with deepspeed (its engine steps after one backward)")
            if self.loss.pcgrad:
                raise ValueError("loss.pcgrad is not supported on the DPO anchor (dpo.anchor_weight)")
        reference = self.dpo.reference_model or self.model.init_from
        if self.dpo.reference == "precomputed" and reference is None:
            raise ValueError("dpo.reference 'precomputed' needs a checkpoint: dpo.reference_model "
                             "or model.init_from")
        if self.dpo.reference == "model" and self.scaling.strategy == "deepspeed":
            raise ValueError("dpo.reference 'model' keeps a second model on every rank; with "
                             "deepspeed use 'precomputed'")
        return self

    @model_validator(mode="after")
    def _ppo(self) -> "TrainConfig":
        if self.recipe != "ppo":
            if self.shards is None:
                raise ValueError(f"recipe {self.recipe!r} needs shards (the dataset OUT root)")
            return self
        if self.scaling.strategy == "deepspeed":
            raise ValueError("recipe 'ppo' runs with scaling.strategy 'ddp' (rollout actors "
                             "get the full weights each iteration)")
        self._refuse_sad_data_fields("reads data.max_seq_len and the ppo section")
        return self

    def _refuse_sad_data_fields(self, what_it_reads: str, read: tuple[str, ...] = ()) -> None:
        """Recipes other than sad read only data.max_seq_len and the fields in `read`: a data
        field of SAD's set to something else would be ignored silently."""
        if self.data.packing and "packing" not in read:
            raise ValueError(f"data.packing is not supported by recipe {self.recipe!r}")
        defaults = DataConfig()
        sad_only = [name for name in ("tables", "table_weights", "mch_rows", "batch_size",
                                      "bucket_pool_batches")
                    if name not in read and getattr(self.data, name) != getattr(defaults, name)]
        if sad_only:
            raise ValueError(f"data.{sad_only[0]} is read by recipe 'sad' only (recipe "
                             f"{self.recipe!r} {what_it_reads})")

    @model_validator(mode="after")
    def _combinations(self) -> "TrainConfig":
        if self.loss.pcgrad and self.loss.objective != "sad":
            raise ValueError("loss.pcgrad separates the REASON and ACT terms of objective 'sad'")
        if self.loss.pcgrad and self.scaling.strategy == "deepspeed":
            raise ValueError("loss.pcgrad needs per-parameter gradients; not with deepspeed")
        if self.model.builder is None and self.model.init_from is None:
            raise ValueError("model needs a builder or init_from")
        if self.data.packing and self.model.use_landmark:
            raise ValueError("data.packing needs model.use_landmark: false (landmark blocks "
                             "and positions would span the packed documents)")
        return self


def _format_errors(error: ValidationError, source: str, kind: str = "config") -> str:
    lines = [f"invalid {kind} ({source}):"]
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = "unknown field" if item["type"] == "extra_forbidden" \
            else item["msg"].removeprefix("Value error, ")
        lines.append(f"  {path}: {message}")
    return "\n".join(lines)


def load_config(path: str | Path | None, overrides: list[str] | None = None,
                base: dict[str, Any] | None = None) -> TrainConfig:
    """YAML file (or `base`), then `key=value` overrides, then validation."""
    return load_model(TrainConfig, path, overrides, base)


def load_model(model: type[ModelT], path: str | Path | None, overrides: list[str] | None = None,
               base: dict[str, Any] | None = None, kind: str = "config") -> ModelT:
    """`model` from a YAML file (or `base`), then `key=value` overrides, then validation; any
    problem is a ConfigError naming the file or field (`kind` names the config in messages)."""
    data: dict[str, Any] = dict(base or {})
    source = str(path) if path else "arguments"
    if path:
        data.update(read_yaml(path, kind))
    for item in overrides or []:
        set_dotted(data, *parse_override(item))
    if problem := shape_problem(data):
        raise ConfigError(f"invalid {kind} ({source}): {problem}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source, kind)) from None
