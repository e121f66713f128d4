"""What each paper-shaped results page's paper did, beside what the run did: the rows of the protocol table that
opens every results page (report/results_page.py), and which of the paper's claims the run can and cannot test.

Only what the paper, or its authors' official code where the paper's own text was not read, states is written here,
and a fact from the code says so; anything else says "not checked here" rather than guessing. The run's side is
filled from the space file and the runs at export time (results_page.run_facts).
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
# the rows where a run on this project's small data stands in for the paper's scale: every page says so in a sentence
STAND_INS = ("model", "clients", "rounds")  # not-a-metric: rows of the table


@dataclass(frozen=True)
class PaperProtocol:
    paper: str  # how the page names the paper
    facts: dict[str, str]  # aspect -> the paper's setting; missing aspects read NOT_CHECKED
    testable: tuple[str, ...] = field(default_factory=tuple)  # the paper's claims this run can test, and how
    untestable: tuple[str, ...] = field(default_factory=tuple)  # and those it cannot, with the reason

    def fact(self, aspect: str) -> str:
        return self.facts.get(aspect, NOT_CHECKED)

    def stand_in(self, run: dict[str, str]) -> str:
        """The sentence that says the run's model, clients and rounds stand in for the paper's: '... 20 rounds here
        against the paper's 100 (...)', 'simple_cnn here (the paper: not checked here)'."""
        parts = []
        for aspect in STAND_INS:
            here = run.get(aspect, "–")
            unit = "" if aspect == "model" else f" {aspect}"
            fact = self.fact(aspect)
            # a count reads '20 rounds here against the paper's 200'; any other fact is quoted as the paper's
            theirs = f"against the paper's {fact}" if fact[:1].isdigit() else f"(the paper: {fact})"
            parts.append(f"{here}{unit} here {theirs}")
        return (
            "This run's model, clients and rounds stand in for the paper's, scaled to the project's small data: "
            + "; ".join(parts)
            + "."
        )


_UNIVARFL = PaperProtocol(
    paper="UniVarFL (Gupta, Jangid, Sethi; arXiv 2506.08167, 2025)",
    facts={
        "data": "STL-10 and CIFAR image sets, CIFAR-100 among them",
        "participation": "every client in every round",
        "local epochs": "E = 10",
        "label skew": "Dirichlet α ∈ {0.01, 1.0}",
        "optimiser": "SGD, lr 0.01, momentum 0.9, weight decay 1e-5; no schedule named",
        "hyperparameters": "UniVarFL λ = D/4, μ = 0.5",
        "compared": "FedAvg, FedProx, MOON, Freeze (a frozen classifier, FedBABU-like), UniVarFL",
    },
    testable=(
        "Whether UniVarFL at the paper's defaults, and tuned, beats FedAvg, FedProx, MOON and Freeze under strong "
        "(α = 0.01) and mild (α = 1.0) label skew, on the small data and model used here: FedAvg is the primary "
        "reference; FedProx, MOON and Freeze are each compared with the two UniVarFL variants in a Holm family of "
        "their own (the verdicts below).",
        "Whether the paper's adverse cell on STL-10 (UniVarFL below FedAvg at α = 1.0; on CIFAR-100 it is above "
        "FedAvg) also appears in this setting: the UniVarFL rows at α = 1 against FedAvg.",
    ),
    untestable=(
        "The paper's accuracies themselves: other data sets, model and training length.",
        "Any claim specific to STL-10 or CIFAR, or to the paper's number of clients and rounds (its model, "
        "clients, rounds and seeds were not checked here: the paper's code link is dead).",
        "FedUV is not in the paper: its row here is the project's addition and tests no claim of the paper.",
    ),
)

# the official FedUV code (github.com/sonhamin/FedUV, train_fl.py's defaults): what its paper ran, where the paper's
# own text was not checked
_FEDUV_CODE = "official code's default"

PAPERS: dict[str, PaperProtocol] = {
    "univarfl_paper": _UNIVARFL,
    "univarfl_comparison": _UNIVARFL,
    "feduv_table4": PaperProtocol(
        paper="FedUV (Son et al., CVPR 2024), Table 4",
        facts={
            "data": "STL-10 for Table 4; the official code also loads CIFAR-10, CIFAR-100 and Tiny-ImageNet",
            "model": f"simple-cnn ({_FEDUV_CODE}, with ResNet-18 and ResNet-50 as options)",
            "clients": f"10 ({_FEDUV_CODE})",  # not-a-metric: a row of the table
            "participation": f"every client in every round ({_FEDUV_CODE} sample fraction 1.0)",
            "rounds": f"100 ({_FEDUV_CODE})",
            "local epochs": f"E = 10 ({_FEDUV_CODE})",
            "label skew": f"Dirichlet α (0.01 the {_FEDUV_CODE})",
            "optimiser": "SGD, lr 0.01, momentum 0.9, weight decay 1e-5, cosine annealing over the rounds, batch 128 "
            f"({_FEDUV_CODE}s)",
            "hyperparameters": "λ = D/4 (the official code fixes 2.5), μ = 0.5",
            "compared": "FedAvg, Freeze (a never-trained classifier: 23.7 on STL-10), and FedUV with each of its two "
            "terms (classifier variance, uniformity) alone and both",
            "seeds": f"one run per call, seed 42 ({_FEDUV_CODE}); the paper's count not checked here",
        },
        testable=(
            "Which of FedUV's two terms carries the gain over FedAvg (the ordering of the table), on MNIST-5k with "
            "the official code's training protocol.",
            "Where Freeze (the table's never-trained classifier) falls against FedAvg, as in the table's Freeze row.",
        ),
        untestable=("The paper's accuracies: other data sets, model, clients and training length.",),
    ),
    "fedld_table2": PaperProtocol(
        paper="FedLD (MICCAI 2024), Table 2",
        facts={
            "data": "medical images: the Retina and COVID-FL data sets (the official code's README)",
            "model": "ResNet-50 pretrained on ImageNet, a new final layer (official code)",
            "clients": "5 (the official README's command, Retina)",  # not-a-metric: a row of the table
            "participation": "every client in every round (official code's default fraction 1.0)",
            "rounds": "200 (the official README's command)",
            "local epochs": "E = 1 (the official README's command)",
            "label skew": "the Retina data set's prepared splits (`--retina_split`), not a Dirichlet draw",
            "optimiser": "SGD, lr 0.01, batch 50 (README command), momentum 0.5 (official code's default)",
            "hyperparameters": "margin λ 0.1 (IID), 0.03 (non-IID); top 0.8 of the principal directions kept",
            "compared": "neither component, margin control alone, principal-gradient aggregation alone, both",
            "seeds": "one seed, 520, fixed in the official code; the paper's count not checked here",
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
            "data": "federated data sets: Vehicle, Synthetic, Sent140 and Shakespeare for fairness (official code's "
            "README)",
            "model": "one per data set: a linear SVM on Vehicle, an LSTM on Sent140 and Shakespeare (official code)",
            "clients": "the data set's devices (their number not checked here)",  # not-a-metric: a row
            "participation": "10 devices a round in the official README's Vehicle run, sampled with weights "
            "proportional to each device's data",
            "rounds": "per data set: Vehicle 20, Synthetic 20,000, Sent140 200, Shakespeare 80 (official README)",
            "local epochs": "E = 1 (the official README's Vehicle run)",
            "optimiser": "plain SGD, lr 0.01, batch 64 (the official README's Vehicle run)",
            "hyperparameters": "q chosen per data set (q = 5 on Vehicle); h_k from the whole local update's norm "
            "‖Δw_k‖²",
            "compared": "q-FedAvg against FedAvg (q = 0) on accuracy and its spread over clients",
            "seeds": "5 train/test/validation partitions (partition seeds 1 to 5), averaged (official README)",
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
