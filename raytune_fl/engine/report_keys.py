"""The round report's list-valued entries (the logger files each as an artifact, not a metric).

A module of its own, without torch: the driver's MLflow logging reads these names and never trains.
"""

SPECTRUM_KEY = "classifier_spectrum"  # the full spectrum, a list; the summary metrics are sv_*
CLIENT_ACC_KEY = "client_accuracy"  # each client's validation accuracy under the global model, a list
CLIENT_LOG_KEY = "client_log"  # per-client rows of the round (status, steps, simulated time), a list
