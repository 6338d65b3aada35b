"""Looking at a model without running it: a summary of its operators, and a support check.

>>> from kuiperinfer.inspect import summarize, check_support
>>> summarize("resnet18.pnnx.param").macs          # from the .param alone
>>> check_support("resnet18.pnnx.param").runnable  # every layer can be created
"""

from kuiperinfer.inspect.summary import ModelSummary, OperatorSummary, shape_text, summarize
from kuiperinfer.inspect.support import OperatorProblem, SupportReport, UnsupportedType, check_support

__all__ = ["summarize", "ModelSummary", "OperatorSummary", "shape_text",
           "check_support", "SupportReport", "UnsupportedType", "OperatorProblem"]
