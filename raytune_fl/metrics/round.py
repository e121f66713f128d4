"""What a federated round reports, name by name: the engine writes these (engine/federation.py, evaluation.py,
diagnostics.py, the schedules) into each round's report, and every reader (tracking, tune, the console, the
dashboard, the ablation table) takes them from here. `GROUPS` says what each one means, group by group.

Not declared here: a method's own scalars (`Aggregator.metrics()`, e.g. FedOpt's server_step_median) are named by
the method, and a server's other models (`Aggregator.extra_models()`) are scored as `<name>_val_acc`,
`<name>_val_loss`, `<name>_test_acc` and `<name>_test_loss`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

ROUND: Final = "round"

# the global model's scores, every round
VAL_ACC: Final = "val_acc"
VAL_LOSS: Final = "val_loss"
TEST_ACC: Final = "test_acc"
TEST_LOSS: Final = "test_loss"
PERSONAL_VAL_ACC: Final = "personal_val_acc"
PERSONAL_PREFIX: Final = "personal_"
# partition.test_fraction: each client's own test part. personal_test_acc scores the model each client uses (its
# own where the method personalises, else the global one); client_test_acc the global model, on the same samples.
# Each comes sample-weighted (the pooled accuracy) and as _mean (of the clients'), _worst and _bottom10
PERSONAL_TEST_ACC: Final = "personal_test_acc"
CLIENT_TEST_ACC: Final = "client_test_acc"
CLIENT_TEST_ACC_MEAN: Final = "client_test_acc_mean"
CLIENT_TEST_ACC_WORST: Final = "client_test_acc_worst"
CLIENT_TEST_ACC_BOTTOM10: Final = "client_test_acc_bottom10"
PERSONAL_TEST_ACC_MEAN: Final = "personal_test_acc_mean"
PERSONAL_TEST_ACC_WORST: Final = "personal_test_acc_worst"
PERSONAL_TEST_ACC_BOTTOM10: Final = "personal_test_acc_bottom10"

# local training, as the clients report it (ClientUpdate.metrics) and as the round does (sample-weighted means)
LOCAL_LOSS: Final = "loss"
LOCAL_CE: Final = "ce"
TRAIN_LOSS: Final = "train_loss"
TRAIN_CE: Final = "train_ce"
TERM_PREFIX: Final = "term_"

# the gradient probe (diagnostics.gradient_norms)
GRAD_NORM_TOTAL: Final = "grad_norm_total"
GRAD_NORM_CE: Final = "grad_norm_ce"
GRAD_NORM_PREFIX: Final = "grad_norm_"
GRAD_COS_PREFIX: Final = "grad_cos_"

# the spread over clients (diagnostics.client_accuracy)
CLIENT_ACC_MEAN: Final = "client_acc_mean"
CLIENT_ACC_WORST: Final = "client_acc_worst"
CLIENT_ACC_STD: Final = "client_acc_std"
CLIENT_ACC_VAR: Final = "client_acc_var"
CLIENT_ACC_P10: Final = "client_acc_p10"  # no longer reported: read from older runs only
CLIENT_ACC_BOTTOM10: Final = "client_acc_bottom10"

# the classifier's spectrum (diagnostics.spectrum)
SV_MAX: Final = "sv_max"
SV_MIN: Final = "sv_min"
SV_MIN_OVER_MAX: Final = "sv_min_over_max"
SV_EFFECTIVE_RANK: Final = "sv_effective_rank"

# FedLD's loss decomposition (diagnostics.decomposition)
LOSS_LOCAL: Final = "loss_local"
LOSS_SHIFT: Final = "loss_shift"
LOSS_AGGREGATION: Final = "loss_aggregation"

# participation and faults
CLIENTS: Final = "clients"
CLIENTS_SAMPLED: Final = "clients_sampled"
CLIENTS_DROPPED: Final = "clients_dropped"
CLIENTS_LATE: Final = "clients_late"
CLIENTS_LOST: Final = "clients_lost"
ACTOR_FAILURES: Final = "actor_failures"
ACTOR_FAILURES_TOTAL: Final = "actor_failures_total"

# the simulated clock (system heterogeneity, FedBuff)
SIM_TIME: Final = "sim_time"
STALENESS_MEAN: Final = "staleness_mean"
STALENESS_MAX: Final = "staleness_max"

# differential privacy (base.privacy; engine/privacy.py)
EPSILON: Final = "epsilon"
DP_NOISE_MULTIPLIER: Final = "dp_noise_multiplier"
DP_CLIPPED_FRACTION: Final = "dp_clipped_fraction"

# traffic: what the clients upload (engine/traffic.py)
UPLOAD_BYTES: Final = "upload_bytes"
UPLOAD_BYTES_PER_CLIENT: Final = "upload_bytes_per_client"

# the hyperparameters in force at the round, under PBT (tune/trainable.py): hp.<name>
HP_PREFIX: Final = "hp."

# system metrics (opt-in: tracking/system_metrics.py), MLflow's names under its prefix
SYSTEM_PREFIX: Final = "system/"

# wall-clock timings, in seconds
ROUND_TIME_S: Final = "round_time_s"
AGGREGATE_S: Final = "aggregate_s"
EVALUATE_S: Final = "evaluate_s"
DECOMPOSITION_S: Final = "decomposition_s"
SETUP_S: Final = "setup_s"

# divergence
DIVERGED: Final = "diverged"
DIVERGENCE_KEY: Final = "divergence"

# chance level (engine/chance.py): what a model that learned nothing scores on each evaluated split
VAL_CHANCE: Final = "val_chance"
TEST_CHANCE: Final = "test_chance"
COLLAPSED: Final = "collapsed"

# lists, filed as tables rather than logged as metrics
SPECTRUM_KEY: Final = "classifier_spectrum"
CLIENT_ACC_KEY: Final = "client_accuracy"
CLIENT_LOG_KEY: Final = "client_log"

# a round between evaluations (eval_every > 1): the names its Tune result carries from the last evaluated round
CARRIED_KEY: Final = "carried"

SCORES: Final = (VAL_ACC, VAL_LOSS, TEST_ACC, TEST_LOSS)
TRAIN_NAMES: Final[Mapping[str, str]] = {LOCAL_LOSS: TRAIN_LOSS, LOCAL_CE: TRAIN_CE}  # the rest keep their names

GROUPS: Final[Mapping[str, Mapping[str, str]]] = {
    "the round": {
        ROUND: "the round's number, from 1 (MLflow's step); a diverged run's last report has the round it failed in",
    },
    "accuracy and loss of the global model": {
        VAL_ACC: "accuracy on the clients' held-out validation samples (NaN without a validation split); what a "
        "study selects on unless tune.metric says val_loss",
        VAL_LOSS: "mean cross-entropy on the validation samples (NaN without a validation split)",
        TEST_ACC: "accuracy on the test set: reported beside, never selected on",
        TEST_LOSS: "mean cross-entropy on the test set",
        PERSONAL_VAL_ACC: "methods that personalise: accuracy of each client's own model on its held-out samples",
        PERSONAL_PREFIX: "personal_client_acc_mean/_worst/_std: the spread over clients of the personalised models",
        PERSONAL_TEST_ACC: "partition.test_fraction: the model each client uses (its own, else the global one) on "
        "that client's own test part; _mean, _worst, _bottom10 over clients",
        CLIENT_TEST_ACC: "partition.test_fraction: the global model on each client's own test part; _mean, _worst, "
        "_bottom10 over clients",
        CLIENT_TEST_ACC_MEAN: "the global model's accuracy on each client's own test part: unweighted mean over the "
        "clients with one",
        CLIENT_TEST_ACC_WORST: "the lowest client's",
        CLIENT_TEST_ACC_BOTTOM10: "the mean of the worst ceil(K/10) clients' (as client_acc_bottom10)",
        PERSONAL_TEST_ACC_MEAN: "the model each client uses on its own test part: unweighted mean over the clients "
        "with one",
        PERSONAL_TEST_ACC_WORST: "the lowest client's",
        PERSONAL_TEST_ACC_BOTTOM10: "the mean of the worst ceil(K/10) clients' (as client_acc_bottom10)",
    },
    "local training (means over the round's clients, weighted by their samples)": {
        LOCAL_LOSS: "a client's local loss, as it reports it (ClientUpdate.metrics); the round's is train_loss",
        LOCAL_CE: "a client's local cross-entropy, as it reports it; the round's is train_ce",
        TRAIN_LOSS: "the local training loss: cross-entropy plus the method's weighted loss terms",
        TRAIN_CE: "its cross-entropy part",
        TERM_PREFIX: "term_<name>: a method's loss term, unweighted, averaged over the steps it was on",
    },
    "gradient norms (diagnostics.gradient_norms, on the costly rounds)": {
        GRAD_NORM_TOTAL: "norm of the gradient of the whole local loss, mean over the probed batches",
        GRAD_NORM_CE: "norm of cross-entropy's gradient",
        GRAD_NORM_PREFIX: "grad_norm_<term>: norm of a weighted loss term's gradient",
        GRAD_COS_PREFIX: "grad_cos_<term>: cosine of a term's gradient with cross-entropy's",
    },
    "accuracy over clients (diagnostics.client_accuracy)": {
        CLIENT_ACC_MEAN: "the global model's accuracy on each client's held-out samples: unweighted mean over clients",
        CLIENT_ACC_WORST: "the lowest client's accuracy",
        CLIENT_ACC_STD: "the standard deviation over clients (ddof 0)",
        CLIENT_ACC_VAR: "the variance over clients (ddof 0): q-FFL's measure of unfairness",
        CLIENT_ACC_P10: "runs logged before client_acc_bottom10 only (no longer reported): the 10th percentile over "
        "clients by numpy's linear interpolation, with 10 clients 0.1 x the worst + 0.9 x the second worst",
        CLIENT_ACC_BOTTOM10: "q-FFL's worst 10 %: the mean accuracy of the worst ceil(K/10) of the K clients "
        "evaluated (the single worst for up to 10 clients, the worst 2 for 11 to 20)",
    },
    "classifier spectrum (diagnostics.spectrum)": {
        SV_MAX: "the classifier weight's largest singular value",
        SV_MIN: "its smallest singular value",
        SV_MIN_OVER_MAX: "smallest over largest: small when the spectrum collapses (FedUV)",
        SV_EFFECTIVE_RANK: "exp(entropy of the normalised spectrum): the class count when flat, 1 at rank one",
    },
    "loss decomposition (diagnostics.decomposition, FedLD's Eq. 2, on the costly rounds)": {
        LOSS_LOCAL: "the clients' models on their own data (sample-weighted)",
        LOSS_SHIFT: "the clients' models on the validation data minus on their own",
        LOSS_AGGREGATION: "the aggregated model's validation loss minus the clients' models' on the same data",
    },
    "participation and faults": {
        CLIENTS: "updates aggregated this round",
        CLIENTS_SAMPLED: "clients in the round's log: sampled (FedBuff: arrived), whatever became of them",
        CLIENTS_DROPPED: "of those, dropped out (system.dropout): never reported",
        CLIENTS_LATE: "of those, past the round's deadline (system.deadline): not aggregated",
        CLIENTS_LOST: "of those, lost with a worker that died while training them",
        ACTOR_FAILURES: "worker (actor) deaths reported with this round",
        ACTOR_FAILURES_TOTAL: "worker deaths since the run began (a restored run counts on from its checkpoint)",
    },
    "simulated clock (system heterogeneity on, or FedBuff)": {
        SIM_TIME: "simulated time at the round's end: one unit is one local step of a client at the median speed",
        STALENESS_MEAN: "FedBuff: mean staleness of the aggregated updates (rounds completed since their client began)",
        STALENESS_MAX: "FedBuff: the largest staleness among them",
    },
    "differential privacy (base.privacy: docs/explanation/privacy.md)": {
        EPSILON: "the epsilon spent so far at privacy.delta, by privacy.accountant: central = over the rounds run "
        "(client-level); local = the largest over the clients of each one's local steps so far (sample-level)",
        DP_NOISE_MULTIPLIER: "the noise multiplier in force (given, or derived from privacy.target_epsilon)",
        DP_CLIPPED_FRACTION: "central: the share of the round's client updates the clip scaled down (a diagnostic "
        "of the simulation, outside the accountant)",
    },
    "traffic (bytes the clients upload, engine/traffic.py)": {
        UPLOAD_BYTES: "bytes the round's aggregated updates carried, summed over their clients: the nbytes of every "
        "array in an update's delta and buffers, and of the method's extras (SCAFFOLD's control-variate change, "
        "FedPAC's class statistics, q-FFL's loss); not a client's own state, which a real client keeps; dropped, "
        "late and lost clients add nothing",
        UPLOAD_BYTES_PER_CLIENT: "upload_bytes over the clients aggregated (absent from a round none reported)",
    },
    "hyperparameters in force (tune.scheduler.pbt, and an ablation replaying its schedule)": {
        HP_PREFIX: "hp.<name>: a searched hyperparameter's value at the round (a number; a boolean as 0/1; a text "
        "choice is in the schedule only): its curve is the trial's schedule",
    },
    "system metrics (opt-in: --system-metrics or MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=true)": {
        SYSTEM_PREFIX: "system/<name>: MLflow's CPU, memory and GPU monitors sampled in the trial's process at each "
        "report, on the node it runs on (cpu_utilization_percentage, system_memory_usage_megabytes, "
        "gpu_0_utilization_percentage, ...): MLflow metrics of the trial's run only, not in round_metrics.parquet",
    },
    "timings (wall-clock seconds)": {
        ROUND_TIME_S: "the round, from the end of the previous round's evaluation to the end of its own",
        AGGREGATE_S: "aggregation, part of round_time_s",
        EVALUATE_S: "the global (and personalised) evaluation, part of round_time_s",
        DECOMPOSITION_S: "the loss decomposition, timed apart from round_time_s",
        SETUP_S: "the first round a run (or a restored run) reports: starting its client pool, apart from round times",
    },
    "divergence": {
        DIVERGED: "1 on the last report of a run that hit a NaN/Inf loss or model (it carries val_acc 0, val_loss inf)",
        DIVERGENCE_KEY: "why that run diverged, as text",
    },
    "chance level (engine/chance.py, on evaluated rounds)": {
        VAL_CHANCE: "the validation split's chance bound b + 2 sqrt(b (1 - b) / n), b = max(1/K, its majority-class "
        "rate), n its size: what a model that learned nothing stays under (NaN without a validation split)",
        TEST_CHANCE: "the test set's chance bound, by the same rule",
        COLLAPSED: "1 when val_acc or test_acc is at or under its chance bound, else 0; a run that ran every round "
        "and ends with 1 has the status collapsed (kept out of the ablation table's means)",
    },
    "per-round lists (filed as tables, not logged as metrics)": {
        SPECTRUM_KEY: "every singular value of the classifier weight, descending (diagnostics.spectrum)",
        CLIENT_ACC_KEY: "each client's validation accuracy under the global model (diagnostics.client_accuracy)",
        CLIENT_LOG_KEY: "a row per logged client: status, local steps, simulated time, where it trained",
    },
    "rounds between evaluations (eval_every > 1)": {
        CARRIED_KEY: "the names a round between evaluations carries from the last evaluated round, in its Tune "
        "result only (Tune's scheduler and searcher need the tuned metric in every result); never logged",
    },
}
