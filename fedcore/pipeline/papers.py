"""Each shipped method's name as its paper writes it, the paper, and its page in docs/methods.

The one source of a method's display name: the LaTeX tables print ``SA-PEF`` where the configs
say ``sapef_topk``, and ``scripts/gen_docs.py`` lists the papers in the generated pages.
"""

from __future__ import annotations

from typing import NamedTuple


class MethodPaper(NamedTuple):
    """A shipped method (a file of configs/methods): its display name, its paper and the page
    of docs/methods that explains it."""

    name: str
    paper: str
    page: str


METHODS: dict[str, MethodPaper] = {
    "afl": MethodPaper("AFL", "Mohri, Sivek, Suresh, ICML 2019", "afl"),
    "config": MethodPaper("ConFIG", "Liu, Chu, Thuerey, ICLR 2025", "config"),
    "craft": MethodPaper("CRAFT", "Wang, Liu, Thuerey, arXiv 2605.21317", "craft"),
    "craft_model": MethodPaper("CRAFT (one group)", "Wang, Liu, Thuerey, arXiv 2605.21317",
                               "craft"),
    "crf_fedavg": MethodPaper("CRF-FedAvg", "Fenoglio et al., SPIGM@ICML 2026", "crf"),
    "crf_fedprox": MethodPaper("CRF-FedProx", "Fenoglio et al., SPIGM@ICML 2026", "crf"),
    "cser_topk": MethodPaper("CSER", "Xie et al., NeurIPS 2020", "compression"),
    "ditto": MethodPaper("Ditto", "Li et al., ICML 2021", "ditto"),
    "ditto_craft": MethodPaper("Ditto+CRAFT", "Li et al., ICML 2021 (with CRAFT)", "ditto"),
    "ef_topk": MethodPaper("EF", "Stich et al., NeurIPS 2018", "compression"),
    "fedalign_fedoui": MethodPaper(
        "FedAlign (FedOUI)", "FedOUI repository's \"FedAlign\" (not Mendieta et al.)",
        "fedalign"),
    "fedavg": MethodPaper("FedAvg", "McMahan et al., AISTATS 2017", "fedavg"),
    "fedavg_topk": MethodPaper("FedAvg Top-k", "Top-k uplink without error feedback",
                               "compression"),
    "fedavgm": MethodPaper("FedAvgM", "Hsu et al., arXiv 1909.06335", "fedavgm"),
    "fedbuff": MethodPaper("FedBuff", "Nguyen et al., AISTATS 2022", "fedbuff"),
    "feddyn": MethodPaper("FedDyn", "Acar et al., ICLR 2021", "feddyn"),
    "fedfv": MethodPaper("FedFV", "Wang et al., IJCAI 2021", "fedfv"),
    "fedlf": MethodPaper("FedLF", "Pan et al., AAAI 2024", "fedlf"),
    "fednova": MethodPaper("FedNova", "Wang et al., NeurIPS 2020", "fednova"),
    "fedoui": MethodPaper("FedOUI", "Fernández-Hernández et al., arXiv 2605.11571", "fedoui"),
    "fedprox": MethodPaper("FedProx", "Li et al., MLSys 2020", "fedprox"),
    "fedquad": MethodPaper("FedQuad", "Göksu, Pugeault, arXiv 2509.04107", "fedquad"),
    "geometric_median": MethodPaper("Geom. median", "Pillutla et al., IEEE TSP 2022", "rfa"),
    "krum": MethodPaper("Krum", "Blanchard et al., NeurIPS 2017", "krum"),
    "median": MethodPaper("Median", "Yin et al., ICML 2018", "trimmed_mean"),
    "moon": MethodPaper("MOON", "Li, He, Song, CVPR 2021", "moon"),
    "multikrum": MethodPaper("Multi-Krum", "Blanchard et al., NeurIPS 2017", "krum"),
    "qfedavg": MethodPaper("q-FedAvg", "Li et al., ICLR 2020", "qfedavg"),
    "quadrupletfl": MethodPaper("QuadrupletFL", "Chen et al., CVPR 2017", "quadrupletfl"),
    "rfa": MethodPaper("RFA", "Pillutla et al., IEEE TSP 2022", "rfa"),
    "saef_topk": MethodPaper("SAEF", "Xu et al., AAAI 2021", "compression"),
    "sapef_topk": MethodPaper("SA-PEF", "Redie, Arablouei, Werner, TMLR 2026", "sapef"),
    "scafcom_topk": MethodPaper("SCAFCOM", "Huang, Li, Li, ICLR 2024", "scafcom"),
    "scaffold": MethodPaper("SCAFFOLD", "Karimireddy et al., ICML 2020", "scaffold"),
    "supconfl": MethodPaper("SupConFL", "Khosla et al., NeurIPS 2020 (SupCon loss)",
                            "supconfl"),
    "trimmed_mean": MethodPaper("Trimmed mean", "Yin et al., ICML 2018", "trimmed_mean"),
    "tripletfl": MethodPaper("TripletFL", "Schroff et al., CVPR 2015 (triplet loss)",
                             "tripletfl"),
}


def display_name(row: str) -> str:
    """A row label with its method as the paper writes it: ``sapef_topk`` -> ``SA-PEF``,
    ``craft (tuned)`` -> ``CRAFT (tuned)``, ``fedavg lr=0.1`` -> ``FedAvg lr=0.1``; a method
    that is not shipped (a plugin's) keeps its name."""
    method, sep, rest = str(row).partition(" ")
    known = METHODS.get(method)
    return (known.name if known else method) + sep + rest
