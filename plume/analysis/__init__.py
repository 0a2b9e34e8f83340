"""Plume stages 1-2: candidate features, critical-feature selection, clustering (cached).

numpy / pandas / scikit-learn only (no Hydra, no W&B), usable on its own::

    from plume.analysis import AnalysisSettings, analyze, adjusted_rand_index
    from plume.traces import load_tracebench

    traces = load_tracebench("majority_fast", "train")
    result = analyze(traces, AnalysisSettings(), cache_dir="cache/analysis")
    result.k, result.kept, result.labels, result.memberships
    adjusted_rand_index(result)  # vs the ground-truth kinds
"""

from plume.analysis.clustering import (
    REFERENCE_MIN_CLUSTER_FRACTION,
    Clustering,
    KSearch,
    choose_k,
    cluster,
    fit_gmm,
    fit_kmeans,
    random_clustering,
    silhouette,
    standardize,
)
from plume.analysis.features import (
    CALCULATORS,
    CENTRAL_CALCULATORS,
    CONSTANT_FEATURES,
    FEATURE_SETS,
    FeatureSpec,
    calculator_of,
    central_features,
    compute_feature_matrix,
    compute_features,
    feature_name,
    impute,
    resolve_feature_set,
    spread_features,
)
from plume.analysis.pipeline import (
    ANALYSIS_FORMAT_VERSION,
    AnalysisSettings,
    TraceAnalysis,
    adjusted_rand_index,
    analyze,
    assignment_table,
    cache_path,
    contingency_table,
)
from plume.analysis.selection import (
    SELECTION_PRESETS,
    SelectionResult,
    SelectionSettings,
    SelectionStep,
    select_features,
    selection_schedule,
    tree_importances,
)

__all__ = [
    "ANALYSIS_FORMAT_VERSION",
    "CALCULATORS",
    "CENTRAL_CALCULATORS",
    "CONSTANT_FEATURES",
    "FEATURE_SETS",
    "REFERENCE_MIN_CLUSTER_FRACTION",
    "SELECTION_PRESETS",
    "AnalysisSettings",
    "Clustering",
    "FeatureSpec",
    "KSearch",
    "SelectionResult",
    "SelectionSettings",
    "SelectionStep",
    "TraceAnalysis",
    "adjusted_rand_index",
    "analyze",
    "assignment_table",
    "cache_path",
    "calculator_of",
    "central_features",
    "choose_k",
    "cluster",
    "compute_feature_matrix",
    "compute_features",
    "contingency_table",
    "feature_name",
    "fit_gmm",
    "fit_kmeans",
    "impute",
    "random_clustering",
    "resolve_feature_set",
    "select_features",
    "selection_schedule",
    "silhouette",
    "spread_features",
    "standardize",
    "tree_importances",
]
