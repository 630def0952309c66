"""A custom reward in verl's contract: compute_score(data_source, solution_str, ground_truth, extra_info)."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    answer = solution_str.rsplit("####", 1)[-1].strip() if "####" in solution_str else None
    return 1.0 if answer == str(ground_truth).strip() else 0.0
