"""What each paper-shaped results page's paper did, beside what the run did: the rows of the protocol table that
opens every results page (report/results_page.py), and which of the paper's claims the run can and cannot test.

Only what was checked against the paper itself is written here; anything else says "not checked here" rather
than guessing. The run's side is filled from the space file and the runs at export time (results_page.run_facts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

NOT_CHECKED = "not checked here"
# the rows of the protocol table, in order; the run's side uses the same keys
ASPECTS = (
    "data",
    "model",
    "clients",  # not-a-metric: a row of the table
    "participation",
    "rounds",
    "local epochs",
    "label skew",
    "optimiser",
    "hyperparameters",
    "compared",
    "seeds",
)


@dataclass(frozen=True)
class PaperProtocol:
    paper: str  # how the page names the paper
    facts: dict[str, str]  # aspect -> the paper's setting; missing aspects read NOT_CHECKED
    testable: tuple[str, ...] = field(default_factory=tuple)  # the paper's claims this run can test, and how
    untestable: tuple[str, ...] = field(default_factory=tuple)  # and those it cannot, with the reason

    def fact(self, aspect: str) -> str:
        return self.facts.get(aspect, NOT_CHECKED)


_UNIVARFL = PaperProtocol(
    paper="UniVarFL (Gupta, Jangid, Sethi; arXiv 2506.08167, 2025)",
    facts={
        "data": "STL-10 and CIFAR image sets",
        "participation": "every client in every round",
        "local epochs": "E = 10",
        "label skew": "Dirichlet α ∈ {0.01, 1.0}",
        "optimiser": "SGD, lr 0.01, momentum 0.9, weight decay 1e-5; no schedule named",
        "hyperparameters": "UniVarFL λ = D/4, μ = 0.5",
        "compared": "FedAvg, FedProx, MOON, Freeze (a frozen classifier, FedBABU-like), UniVarFL",
    },
    testable=(
        "Whether UniVarFL at the paper's defaults, and tuned, beats FedAvg, FedProx, MOON and Freeze under strong "
        "(α = 0.01) and mild (α = 1.0) label skew, on the small data and model used here.",
        "Whether the paper's adverse cell (UniVarFL below FedAvg at α = 1.0) also appears in this setting.",
    ),
    untestable=(
        "The paper's accuracies themselves: other data sets, model and training length.",
        "Any claim specific to STL-10 or CIFAR, or to the paper's number of clients and rounds.",
        "FedUV is not in the paper: its row here is the project's addition and tests no claim of the paper.",
    ),
)

PAPERS: dict[str, PaperProtocol] = {
    "univarfl_paper": _UNIVARFL,
    "univarfl_comparison": _UNIVARFL,
    "feduv_table4": PaperProtocol(
        paper="FedUV (Son et al., CVPR 2024), Table 4",
        facts={
            "hyperparameters": "λ = D/4 (the official code fixes 2.5), μ = 0.5",
            "compared": "FedAvg and FedUV with each of its two terms (classifier variance, uniformity) alone and both",
        },
        testable=(
            "Which of FedUV's two terms carries the gain over FedAvg (the ordering of the table), on MNIST-5k with "
            "the official code's training protocol.",
        ),
        untestable=(
            "The paper's accuracies: other data sets, model, clients and training length.",
            "The never-trained classifier row (freeze) is a FedBABU-like reference the project adds.",
        ),
    ),
    "fedld_table2": PaperProtocol(
        paper="FedLD (MICCAI 2024), Table 2",
        facts={
            "hyperparameters": "margin λ 0.1 (IID), 0.03 (non-IID)",
            "compared": "neither component, margin control alone, principal-gradient aggregation alone, both",
        },
        testable=(
            "Whether margin control and principal-gradient aggregation each help FedAvg, and together, on MNIST-5k "
            "at two label skews.",
        ),
        untestable=(
            "The paper's medical-imaging results: other data, model and clients.",
            "Its feature-shift settings: only label skew is run here.",
        ),
    ),
    "qffl_forms": PaperProtocol(
        paper="q-FFL (Li et al., ICLR 2020), Algorithm 2 (q-FedAvg)",
        facts={
            "hyperparameters": "q chosen per data set; h_k from the whole local update's norm ‖Δw_k‖²",
            "compared": "q-FedAvg against FedAvg (q = 0) on accuracy and its spread over clients",
        },
        testable=(
            "Whether q > 0 lowers the spread of accuracy over clients and lifts the worst clients against FedAvg, "
            "in the paper's form and in the project's per-step form, with momentum SGD.",
        ),
        untestable=(
            "The paper's data sets and its plain-SGD local solver: the project's clients train with momentum 0.9, "
            "the setting the per-step form was made for.",
        ),
    ),
}
