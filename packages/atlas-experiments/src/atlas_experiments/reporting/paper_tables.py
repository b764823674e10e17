"""The paper's reported numbers (arXiv 2505.23735 v1, transcription notes in docs/deviations.md).

Keys are our preset names; values are the table columns. Baseline rows the paper copied from other papers
are included as printed. Only numbers, no text of the paper.
"""

from __future__ import annotations

LM_COLUMNS = ("wiki_ppl", "lmb_ppl", "lmb_acc", "piqa", "hella", "wino", "arc_e", "arc_c", "siqa", "boolq", "avg")

# Table 2, 760M parameters / 30B tokens.
TABLE2_760M = {
    "transformer_pp": (25.21, 27.64, 35.8, 66.9, 42.2, 51.9, 60.4, 32.5, 39.5, 60.4, 48.69),
    "deep_transformer": (20.32, 20.67, 36.9, 68.4, 49.8, 52.8, 65.7, 34.9, 40.2, 61.8, 51.31),
    "dot": (19.96, 20.15, 39.0, 69.1, 50.7, 53.1, 66.2, 37.0, 40.3, 63.7, 52.39),
    "deltanet": (24.37, 24.60, 37.1, 66.9, 42.0, 50.7, 64.9, 31.4, 39.9, 59.0, 48.97),
    "gated_deltanet": (21.18, 22.09, 35.5, 68.0, 44.9, 50.7, 66.9, 33.1, 39.2, 59.1, 49.69),
    "titans_lmm": (20.04, 21.96, 37.4, 69.3, 48.5, 52.3, 66.3, 35.8, 40.1, 62.8, 51.56),
    "swdt": (19.89, 21.52, 36.2, 68.3, 45.2, 53.0, 65.4, 34.2, 39.5, 59.5, 50.1),
    "dla": (23.12, 22.09, 36.1, 68.0, 47.9, 52.7, 65.8, 34.6, 39.1, 59.6, 50.46),
    "omeganet": (19.16, 20.14, 38.7, 69.8, 50.0, 53.3, 67.8, 36.8, 39.6, 64.4, 52.56),
    "atlas": (18.92, 21.01, 39.1, 69.7, 50.2, 53.5, 67.5, 37.1, 40.7, 64.3, 52.77),
    "atlas_pp": (19.04, 20.03, 39.7, 69.7, 51.1, 53.2, 68.2, 37.4, 40.9, 64.4, 53.09),
    "atlas_mag": (18.62, 21.18, 40.0, 70.3, 50.5, 53.0, 68.1, 36.5, 41.2, 65.0, 53.08),
    "atlas_mal": (19.07, 21.46, 38.8, 69.2, 50.5, 53.6, 67.3, 36.1, 41.0, 64.5, 52.63),
}

# Table 2, 1.3B parameters / 100B tokens.
TABLE2_1_3B = {
    "transformer_pp": (18.53, 18.32, 42.6, 70.0, 50.2, 53.5, 68.8, 35.1, 40.7, 57.1, 52.25),
    "deep_transformer": (15.67, 12.63, 49.4, 72.6, 57.0, 58.8, 71.1, 37.5, 41.6, 61.5, 56.19),
    "dot": (15.28, 11.96, 50.1, 73.3, 57.5, 60.4, 72.2, 41.2, 42.7, 61.4, 57.35),
    "deltanet": (17.71, 16.88, 42.5, 70.7, 50.9, 53.3, 68.5, 35.7, 40.2, 55.3, 52.14),
    "gated_deltanet": (16.42, 12.17, 46.6, 72.2, 55.8, 57.4, 71.2, 38.4, 40.6, 60.2, 55.32),
    "titans_lmm": (15.60, 11.41, 49.1, 73.1, 56.3, 59.8, 72.4, 40.8, 42.1, 61.0, 56.82),
    "omeganet": (14.91, 11.26, 49.7, 73.4, 57.6, 59.7, 72.6, 40.3, 42.4, 62.1, 57.23),
    "atlas": (14.97, 10.98, 50.1, 73.9, 57.3, 60.2, 72.8, 41.0, 42.9, 62.8, 57.62),
    "atlas_pp": (14.40, 10.72, 50.8, 73.5, 59.4, 61.1, 71.3, 43.7, 42.5, 61.9, 58.03),
}

# Table 8 (App. F), 340M parameters / 15B tokens (the rows of our presets).
TABLE8_340M = {
    "transformer_pp": (31.52, 41.08, 30.76, 62.98, 34.76, 50.53, 45.21, 24.05, 36.81, 58.24, 42.92),
    "deltanet": (28.65, 47.30, 28.43, 63.52, 35.95, 49.63, 52.68, 25.37, 37.96, 58.79, 44.04),
    "gated_deltanet": (27.01, 30.94, 34.11, 63.08, 38.12, 51.60, 55.28, 26.77, 34.89, 59.54, 45.42),
    "dla": (27.93, 35.09, 30.8, 62.9, 36.2, 50.4, 53.5, 26.7, 37.1, 59.7, 44.76),
    "swdt": (26.98, 33.95, 32.4, 63.1, 38.2, 50.9, 54.9, 25.9, 37.5, 59.6, 45.31),
    "omeganet": (26.03, 28.76, 35.6, 65.3, 39.7, 52.0, 56.1, 28.6, 37.7, 60.4, 46.93),
    "atlas": (25.88, 28.54, 36.1, 64.9, 40.1, 52.7, 56.4, 28.8, 38.1, 61.2, 47.28),
    "titans_lmm": (26.18, 29.97, 34.98, 64.73, 39.61, 51.85, 55.60, 28.14, 34.52, 59.99, 46.17),
}

# Table 6: Atlas ablations at 760M, (LM ppl = (wiki + lmb) / 2, common-sense accuracy).
TABLE6_ABLATIONS = {
    "atlas": (19.97, 52.77),
    "gated_mlp (Atlas++)": (19.53, 53.09),
    "+attn MAG": (19.90, 53.08),
    "+attn MAL": (20.26, 52.63),
    "linear memory": (21.03, 49.74),
    "w/o muon (OmegaNet)": (19.65, 52.56),
    "c = 1": (21.98, 49.26),
    "w/o polynomial map": (22.14, 50.57),
}

# Which Table 6 row a cell of each ablation axis speaks to: (settings the cell must have, row); the first match
# wins. poly_degree=1 is no row: it keeps the constant feature and a learnable a_1, while the paper's "w/o
# polynomial map" is phi = identity.
ABLATION_ROWS = {
    "gated_mlp": (({"memory": "mlp"}, "atlas"), ({"memory": "gated_mlp"}, "gated_mlp (Atlas++)"),
                  ({"memory": "linear"}, "linear memory")),
    "optimizer": (({"optimizer": "muon"}, "atlas"), ({"optimizer": "gd"}, "w/o muon (OmegaNet)")),
    "window": (({"window": "1"}, "c = 1"),),
    "poly_degree": (({"feature_map": "identity"}, "w/o polynomial map"),),
}  # fmt: skip

NIAH_COLUMNS = ("PK-2K", "PK-4K", "PK-8K", "PK-16K", "N-2K", "N-4K", "N-8K", "N-16K", "W-2K", "W-4K", "W-8K")
# Table 3: S-NIAH (RULER) accuracy; PK = passkey (niah_single_1), N = number (2), W = uuid/word (3).
TABLE3_NIAH = {
    "deltanet": (96.8, 98.8, 98.6, 71.4, 47.2, 15.4, 12.8, 5.4, 46.2, 20.0, 1.6),
    "titans_lmm": (99.8, 98.4, 98.2, 96.2, 100.0, 99.8, 93.4, 80.2, 90.4, 89.4, 85.8),
    "atlas": (100, 99.2, 98.0, 97.0, 100.0, 100.0, 93.0, 84.0, 93.2, 90.6, 86.2),
    "atlas_mag": (100, 100, 99.4, 98.6, 100, 99.2, 97.4, 97.0, 99.4, 98.2, 92.4),
    "atlas_mal": (99.8, 99.6, 98.4, 96.8, 99.8, 98.0, 97.2, 96.8, 98.0, 98.4, 92.6),
    "deep_transformer": (100, 100, 98.2, 97.8, 100, 98.8, 97.8, 94.0, 95.8, 92.2, 88.4),
    "dot": (100, 100, 99.6, 98.6, 100, 100, 97.8, 96.8, 99.0, 98.4, 93.2),
}

MAD_COLUMNS = ("compression", "icr", "fuzzy_icr", "selective_copying", "memorization", "avg")
# Table 4: MAD synthetic benchmark accuracy.
TABLE4_MAD = {
    "transformer_pp": (49.4, 100, 48.2, 95.9, 83.8, 75.46),
    "gated_deltanet": (44.8, 100, 32.5, 96.2, 81.7, 71.04),
    "titans_lmm": (49.6, 100, 49.7, 99.4, 83.5, 76.44),
    "omeganet": (50.9, 100, 54.2, 99.6, 90.2, 78.98),
    "atlas": (51.6, 100, 54.9, 99.6, 91.4, 79.50),
}

# Section 6 / Fig. 6 (curves only): the five learnability streams by loss, easiest first ("roughly").
LEARNABILITY_ORDER = (1, 4, 2, 3, 5)
