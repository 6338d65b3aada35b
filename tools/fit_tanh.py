"""Fit the rational approximation of tanh that the compiled kernels use, and check it.

    tanh(x) ~ x * P(x^2) / Q(x^2),  P(0) = Q(0) = 1,  x clamped to [-CLAMP, CLAMP]

A polynomial ratio has no exp, so LLVM vectorises it; the coefficients come from a
least-squares fit reweighted towards the largest errors (Lawson's algorithm, which tends
to the minimax fit), rounded to float32. Running this prints the coefficients that
``kuiperinfer/kernels/compiled/activation.py`` holds and the approximation's worst error
in float32 arithmetic over [-12, 12].

    python -m tools.fit_tanh
"""

import numpy as np

CLAMP = 9.0
P_TERMS, Q_TERMS = 5, 4


def fit() -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(1e-4, CLAMP, 40001)
    x2, target = x * x, np.tanh(x)
    # unknowns p1..p4 (p0 = 1) and q1..q3 (q0 = 1): x*P - tanh*Q = 0 is linear in them
    columns = [x * x2 ** i for i in range(1, P_TERMS)] + [-target * x2 ** j for j in range(1, Q_TERMS)]
    a, b = np.stack(columns, 1), target - x
    weights = np.ones_like(x)
    for _ in range(200):
        coefficients, *_ = np.linalg.lstsq(a * weights[:, None], b * weights, rcond=None)
        p = np.concatenate([[1.0], coefficients[:P_TERMS - 1]])
        q = np.concatenate([[1.0], coefficients[P_TERMS - 1:]])
        error = np.abs(x * np.polyval(p[::-1], x2) / np.polyval(q[::-1], x2) - target)
        weights *= (error / error.max()) ** 0.5 + 1e-3
        weights /= weights.max()
    return p.astype(np.float32), q.astype(np.float32)


def worst_error(p: np.ndarray, q: np.ndarray) -> float:
    x = np.linspace(-12, 12, 2_000_001, dtype=np.float32)
    clamped = np.clip(x, -CLAMP, CLAMP)
    x2 = clamped * clamped
    approx = clamped * np.polyval(p[::-1], x2) / np.polyval(q[::-1], x2)
    return float(np.max(np.abs(approx.astype(np.float64) - np.tanh(x.astype(np.float64)))))


if __name__ == "__main__":
    p, q = fit()
    print("P =", tuple(float(c) for c in p))
    print("Q =", tuple(float(c) for c in q))
    print("worst absolute error in float32:", worst_error(p, q))
