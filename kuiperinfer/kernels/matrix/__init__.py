"""The matrix engine: products of activations and weights in the forms a precision asks for.

A precision (:mod:`.precision`) says what the products of convolutions, linear layers and
matrix multiplications compute, the same numbers on every machine; the CPU decides only
how fast. :mod:`.features` says which matrix instructions this CPU has (AMX tiles,
AVX512-BF16, VNNI); :mod:`.bf16` rounds float32 to bfloat16 and :mod:`.int8` quantizes, the
NumPy references of the forms.
"""
