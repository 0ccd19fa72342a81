"""The PODS paper, as TRL's model cards name and cite a trainer's method (`PODSGRPOTrainer._name` and `._paper`)."""

from __future__ import annotations

import textwrap

__all__ = ["PODS_PAPER"]

PODS_PAPER = {
    "title": "Not All Rollouts are Useful: Down-Sampling Rollouts in LLM Reinforcement Learning",
    "id": "2504.13818",
    "citation": textwrap.dedent("""\
        @article{xu2026pods,
            title   = {{Not All Rollouts Are Useful: Down-Sampling Rollouts in LLM Reinforcement Learning}},
            author  = {Xu, Yixuan Even and Savani, Yash and Fang, Fei and Kolter, J Zico},
            journal = {Transactions on Machine Learning Research},
            year    = 2026,
            eprint  = {arXiv:2504.13818},
        }"""),
}
"""``title``, arXiv ``id`` and BibTeX ``citation``: the keys TRL's `create_model_card` reads from ``_paper``."""
