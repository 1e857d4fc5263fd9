"""WeightDropout: dropping out a weight without cutting it off from its gradient

Question: I wrap my LSTM in the popular WeightDropout (it moves `weight_hh_l0` to a
`weight_hh_l0_raw` parameter and, every forward, gives the LSTM a dropped-out copy of it). The
model trains, but `weight_hh_l0_raw` never changes. Why?

Answer: the widely quoted version drops out `raw_w.data`. `.data` hands out the raw weight's
values with no link to the graph, so the dropped copy has no `grad_fn` and the backward pass
never reaches `weight_hh_l0_raw`: its `.grad` stays None. Drop out `raw_w` itself and the
gradient flows back through the dropout mask: zero exactly where a weight was dropped, and the
surviving entries scaled by 1/(1-p), just as dropout scaled them on the way forward.
Show: line F.dropout(raw_w.data

What to look at: in the `data` variant, `rnn.weight_hh_l0_raw` and `head.weight_raw` are not
in the graph at all, and the diagnostic names the line that read `.data`. In the `fixed` variant
each raw weight has an AccumulateGrad node fed by the dropout's node (on the CPU a MulBackward0:
dropout multiplies by a random 0/1 mask scaled by 1/(1-p), and saves it); open the raw weight's
gradient heat map and its zeros are the dropped positions.
Show: heatmap rnn.weight_hh_l0_raw; diagnostic no_gradient; line F.dropout(raw_w.data

By hand: the `by_hand` variant does the same thing to a plain Linear without a wrapper. Delete
its `weight` and `bias` parameters, assign dropped-out tensors in their place, and the layer's
output equals `x @ weight.T + bias` computed by hand: a module only reads whatever tensor its
attribute holds, and the gradient goes to the parameters those tensors came from.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

VARIANTS = {
    "data": "the widely quoted WeightDropout: drops out raw_w.data (the raw weight never learns)",
    "fixed": "drops out raw_w itself: the gradient reaches the raw weight through the mask",
    "by_hand": "a plain Linear: delete weight and bias, assign dropped-out tensors",
}

P = 0.5  # dropout probability for the weights


class WeightDropout(nn.Module):
    """Move each named weight of `module` to `<name>_raw`, and drop it out on every forward."""

    def __init__(self, module, weight_p, layer_names, use_data):
        super().__init__()
        self.module, self.weight_p, self.layer_names = module, weight_p, layer_names
        self.use_data = use_data
        for layer in layer_names:
            w = getattr(module, layer)
            delattr(module, layer)  # the module no longer owns this weight...
            self.register_parameter(f"{layer}_raw", nn.Parameter(w.detach().clone()))
            setattr(module, layer, w.detach().clone())  # ...it just reads a plain tensor

    def _setweights(self):
        for layer in self.layer_names:
            raw_w = getattr(self, f"{layer}_raw")
            if self.use_data:
                # the widely quoted line: .data has no link to the graph, so no gradient
                # can ever flow back to raw_w
                dropped = F.dropout(raw_w.data, p=self.weight_p, training=self.training)
            else:
                # the fix: dropout is an op on raw_w, recorded in the graph
                dropped = F.dropout(raw_w, p=self.weight_p, training=self.training)
            setattr(self.module, layer, dropped)

    def forward(self, *args):
        self._setweights()
        return self.module(*args)


class Model(nn.Module):
    def __init__(self, use_data):
        super().__init__()
        self.rnn = WeightDropout(nn.LSTM(3, 4, batch_first=True), P, ["weight_hh_l0"], use_data)
        self.head = WeightDropout(nn.Linear(4, 2), P, ["weight"], use_data)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variant", choices=list(VARIANTS), default=next(iter(VARIANTS)))
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(2, 5, 3)  # 2 sequences of 5 steps, 3 features
y = torch.randn(2, 2)

if args.variant == "by_hand":
    linear = nn.Linear(3, 2)
    weight, bias = linear.weight, linear.bias  # keep the parameters before deleting them
    del linear.weight, linear.bias
    linear.weight = F.dropout(weight, p=P, training=True)  # plain tensors with a grad_fn
    linear.bias = F.dropout(bias, p=P, training=True)
    out = linear(x[:, -1])
    by_hand = x[:, -1] @ linear.weight.T + linear.bias
    print("Linear output equals x @ W.T + b by hand:", torch.allclose(out, by_hand))
    loss = F.mse_loss(out, y)
    loss.backward()  # the gradient goes to `weight` and `bias`, through the dropout masks
    dropped = linear.weight == 0
    print("weight.grad is zero where the weight was dropped:",
          bool((weight.grad[dropped] == 0).all()))
else:
    model = Model(use_data=args.variant == "data")
    loss = F.mse_loss(model(x), y)
    loss.backward()
    for name in ("rnn.weight_hh_l0_raw", "head.weight_raw"):
        grad = model.get_parameter(name).grad
        print(f"{name}.grad:", "None" if grad is None else f"norm {grad.norm():.4f}")
