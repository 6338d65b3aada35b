"""Fit the rational approximation of erf that the compiled GELU uses, and check it.

    erf(x) ~ x * P(x^2) / Q(x^2),  Q(0) = 1,  x clamped to [-CLAMP, CLAMP]

Like ``tools/fit_tanh.py``: a polynomial ratio has no exp, so LLVM vectorises it. The
coefficients come from a least-squares fit of ``x P - erf Q = 0`` reweighted towards the
largest errors (Lawson's algorithm, which tends to the minimax fit), rounded to float32.
Beyond CLAMP erf is 1 to float32's precision. Running this prints the coefficients that
``kuiperinfer/kernels/compiled/activation.py`` holds and the worst errors in float32
arithmetic of erf over [-6, 6] and of GELU, ``0.5 x (1 + erf(x / sqrt 2))``, over [-12, 12].

    python -m tools.fit_erf
"""

import math

import numpy as np

CLAMP = 3.92
P_TERMS, Q_TERMS = 6, 5


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)


def fit() -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(1e-4, CLAMP, 40001)
    x2, target = x * x, _erf(x)
    # unknowns p0..p5 and q1..q4 (q0 = 1): x*P - erf*Q = 0 is linear in them
    columns = [x * x2 ** i for i in range(P_TERMS)] + [-target * x2 ** j for j in range(1, Q_TERMS)]
    a, b = np.stack(columns, 1), target
    weights = np.ones_like(x)
    for _ in range(300):
        coefficients, *_ = np.linalg.lstsq(a * weights[:, None], b * weights, rcond=None)
        p = coefficients[:P_TERMS]
        q = np.concatenate([[1.0], coefficients[P_TERMS:]])
        error = np.abs(x * np.polyval(p[::-1], x2) / np.polyval(q[::-1], x2) - target)
        weights *= (error / error.max()) ** 0.5 + 1e-3
        weights /= weights.max()
    return p.astype(np.float32), q.astype(np.float32)


def approx(x: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The approximation as the kernel computes it, in float32 (Horner's rule)."""
    clamped = np.clip(x.astype(np.float32), np.float32(-CLAMP), np.float32(CLAMP))
    x2 = clamped * clamped
    num, den = np.full_like(x2, p[-1]), np.full_like(x2, q[-1])
    for c in p[-2::-1]:
        num = num * x2 + c
    for c in q[-2::-1]:
        den = den * x2 + c
    return np.clip(clamped * num / den, np.float32(-1), np.float32(1))


def worst_errors(p: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    x = np.linspace(-6, 6, 600_001, dtype=np.float32)
    erf_error = np.max(np.abs(approx(x, p, q).astype(np.float64) - _erf(x.astype(np.float64))))
    g = np.linspace(-12, 12, 600_001, dtype=np.float32)
    half = np.float32(math.sqrt(0.5))
    gelu = np.float32(0.5) * g * (np.float32(1) + approx(g * half, p, q))
    exact = 0.5 * g.astype(np.float64) * (1 + _erf(g.astype(np.float64) * math.sqrt(0.5)))
    return float(erf_error), float(np.max(np.abs(gelu - exact)))


if __name__ == "__main__":
    p, q = fit()
    print("P =", tuple(float(c) for c in p))
    print("Q =", tuple(float(c) for c in q))
    erf_error, gelu_error = worst_errors(p, q)
    print("worst absolute error in float32: erf", erf_error, "GELU", gelu_error)
