"""Boundary strategies (docs/design.md §5): causality of every registered strategy, gradients of the
trainable ones, and each rule against a plain reference."""

from __future__ import annotations

import copy

import hypothesis
from hypothesis import strategies as st

import pytest
import torch

from learntok import AUNet, ModelConfig, ObjectiveConfig
from learntok.boundaries import bpe, bpe_causal, strategy_names
from learntok.boundaries.base import build_strategy, strategy_class
from learntok.boundaries.rate import RateControl
from learntok.boundaries.common import whitespace_boundaries
from learntok.boundaries.entropy import EntropyBoundaries
from learntok.boundaries.nawrot import binomial_log_prob, relaxed_bernoulli
from learntok.boundaries.hnet import ratio_loss
from learntok.nn.pooling import ema_reference, ema_scan, mean_pool, mean_pool_reference, upsample
from learntok.run.config import load_config
from learntok.data import BOS, EOS, PAD, encode
from learntok.data.vocab import is_byte
from learntok.util.errors import ConfigError
from learntok.model.generate import generate
from learntok.model.objective import loss

from conftest import shakespeare, tiny_model

TRAIN_TEXT = shakespeare(60_000, skip=20_000)


def tiny(boundary: str, w: int = 8) -> AUNet:
    model = tiny_model(boundary, window=w, target_rate=0.3 if boundary.startswith("bpe") else 0.2)
    # bpe: 0.3, which its pre-tokenizer can reach here; bpe-causal: 0.3, which held-out text can
    model.strategy.fit([TRAIN_TEXT])
    return model


@pytest.fixture(scope="module")
def models() -> dict[str, AUNet]:
    return {name: tiny(name) for name in strategy_names()}


def test_every_strategy_is_tested():
    assert {"learned", "uniform", "fixed", "whitespace", "bpe", "bpe-causal", "entropy", "nawrot", "hnet"} <= set(
        strategy_names()
    )


@pytest.mark.parametrize("name", strategy_names())
@pytest.mark.parametrize("train_mode", [True, False])
@pytest.mark.parametrize("online", [False, True])
def test_causality(models, name, train_mode, online):
    """Decisions, policy logits and outputs at positions <= t never change when a byte after t
    changes (same random draws, same strategy state), for decided and prescribed boundaries,
    and under online rate control (docs/rate.md) where the strategy has it."""
    if not strategy_class(name).causal:
        pytest.skip(f"{name} sees the whole sequence by design (the paper's rule): its lookahead is measured instead")
    if online and not strategy_class(name).online_rate:
        pytest.skip(f"{name} has no online rate control")
    model = models[name]
    model.train(train_mode)
    model.strategy.set_rate_control(RateControl(0.3) if online else None)
    x = encode(shakespeare(90) + "é ü—!".encode()).unsqueeze(0).repeat(2, 1)
    T = x.size(1)
    state = copy.deepcopy(model.state_dict())
    for t in (47, T - 3):
        y = x.clone()
        y[:, t + 1 :] = torch.randint(0, 256, (2, T - t - 1), generator=torch.Generator().manual_seed(t))
        sl = slice(0, t + 1)
        outs = []
        for inp in (x, y):
            model.load_state_dict(state)  # e.g. the entropy threshold's running EMA
            torch.manual_seed(123)
            outs.append(model(inp))
        o1, o2 = outs
        assert torch.equal(o1.boundaries[:, sl], o2.boundaries[:, sl])
        torch.testing.assert_close(o1.logits[:, sl], o2.logits[:, sl], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(o1.boundary_logits[:, sl], o2.boundary_logits[:, sl], atol=1e-5, rtol=1e-5)
        model.load_state_dict(state)
        p1 = model(x, boundaries=o1.boundaries)
        model.load_state_dict(state)
        p2 = model(y, boundaries=o1.boundaries)
        assert torch.equal(p1.boundaries, o1.boundaries)  # prescribed decisions pass through
        torch.testing.assert_close(p1.logits[:, sl], p2.logits[:, sl], atol=1e-5, rtol=1e-5)
    model.load_state_dict(state)
    model.strategy.set_rate_control(None)


@pytest.mark.parametrize(
    "name,params",
    [("learned", ["proj.weight"]), ("nawrot", ["mlp.0.weight", "mlp.2.weight"]), ("hnet", ["q.weight", "k.weight"])],
)
def test_trainable_strategies_get_gradients(name, params):
    model = tiny(name)
    x = torch.stack([encode(shakespeare(64, skip=1000 + 64 * i)) for i in range(4)])
    total, _ = loss(model(x), x, ObjectiveConfig(lambda_pi=1.0))
    total.backward()
    grads = dict(model.strategy.named_parameters())
    for p in params:
        assert grads[p].grad is not None and grads[p].grad.abs().sum() > 0, p


def test_unknown_strategy_lists_known():
    with pytest.raises(ValueError, match="known: .*bpe.*bpe-causal.*hnet.*learned.*nawrot.*uniform"):
        build_strategy(ModelConfig(boundary="wordpiece"))


# ---------------------------------------------------------------- whitespace


@pytest.mark.parametrize(
    "text,expected",
    [
        ("ab cd", "00100"),
        ("a, b", "0100"),  # "," follows a letter; " " follows "," (space-like): no boundary
        ("x1 2", "0010"),  # digits are word bytes
        ("  hi", "0000"),  # space-like after BOS (space-like): none
        ("café!", "000101"),  # é = C3 A9: the lead byte C3 is space-like, the continuation A9 a word byte
        ("é.", "001"),  # C3 after BOS: no; '.' after the continuation byte A9: yes
    ],
)
def test_whitespace_rule(text, expected):
    a = whitespace_boundaries(encode(text).unsqueeze(0))[0]
    assert a[0] == 1
    assert "".join(str(int(v)) for v in a[1:].tolist()) == expected


# ---------------------------------------------------------------- bpe (the paper's)


def byte_starts_by_offsets(tok, text: str) -> list[int]:
    """Reference for ASCII text: the tokenizer's own character offsets are byte offsets."""
    enc = tok.encode(text, add_special_tokens=False)
    return sorted({s for s, e in enc.offsets if e > s})


def test_paper_bpe_boundaries_are_the_first_bytes_of_the_tokens(models):
    """Boundary at 1 + the byte offset of every token of the whole window's BPE (BOS at 0)."""
    strategy = models["bpe"].strategy
    tok = strategy.tokenizer()
    text = shakespeare(300, skip=9000).decode("ascii")
    a = strategy.boundaries(encode(text.encode()).unsqueeze(0))[0]
    assert a[0] == 1 and a[1] == 1
    assert torch.nonzero(a[1:]).flatten().tolist() == byte_starts_by_offsets(tok, text)


def test_paper_bpe_maps_multibyte_and_invalid_bytes():
    """Token starts inside a character split into byte tokens land on the right byte; invalid
    UTF-8 (a window cut inside a character) is left out and never a boundary."""
    text, src = bpe.utf8_text(b"\xa9ab\xc3\xa9\xe2")  # a cut-off char, "ab", "é", a cut-off char
    assert text == "ab\u00e9" and src == [1, 2, 3, 4]
    assert bpe.token_byte_starts(["\u0120ab", "\u00c3", "\u00a9"], src) == [1, 3, 4]  # prefix space, é split
    assert bpe.token_byte_starts(["\u0120", "a", "b\u00c3\u00a9"], src) == [1, 2]
    with pytest.raises(ConfigError, match="not a byte-level BPE"):
        bpe.token_byte_starts(["abcdefg"], src)


def test_paper_bpe_special_symbols_split_runs(models):
    strategy = models["bpe"].strategy
    one = encode(b"the king").tolist()
    x = torch.tensor([one + [EOS] + one[1:]])  # BOS the king EOS the king
    a = strategy.boundaries(x)[0]
    n = len(one)
    assert a[n] == 1 and a[n + 1] == 1  # EOS and the byte after it
    assert torch.equal(a[1:n], a[n + 1 :])  # each run tokenized on its own


def test_paper_bpe_looks_ahead(models):
    """Not causal: some decision at a byte <= t changes with the bytes after t (the reason it is
    skipped by the causality test and refused by generation)."""
    strategy = models["bpe"].strategy
    x = encode(shakespeare(400, skip=3000)).unsqueeze(0)
    full = strategy.boundaries(x)[0]
    changed = sum(int(not torch.equal(strategy.boundaries(x[:, : t + 1])[0], full[: t + 1])) for t in range(1, 400))
    assert changed > 10


def test_paper_bpe_fit_bisects_rate_and_is_saved(models, tmp_path):
    strategy = models["bpe"].strategy
    assert abs(bpe.bpe_rate(strategy.tokenizer(), [TRAIN_TEXT]) - 0.3) < 0.01  # closest to rho* = 0.3 it can get
    models["bpe"].save_pretrained(tmp_path)
    loaded = AUNet.from_pretrained(tmp_path)
    x = encode(shakespeare(100)).unsqueeze(0)
    assert torch.equal(loaded.strategy.boundaries(x), strategy.boundaries(x))


def test_paper_bpe_tokenizer_and_vocab_options(models, tmp_path):
    path = tmp_path / "tokenizer.json"
    models["bpe"].strategy.tokenizer().save(str(path))
    cfg = load_config(overrides=["model.boundary=bpe", "model.target_rate=0.3", f"strategy.tokenizer={path}"]).model
    given = build_strategy(cfg)
    info = given.fit([TRAIN_TEXT])  # loaded, not trained: the sample only measures the rate
    x = encode(shakespeare(200)).unsqueeze(0)
    assert torch.equal(given.boundaries(x), models["bpe"].strategy.boundaries(x))
    assert info["bpe_vocab_size"] == models["bpe"].strategy.tokenizer().get_vocab_size()
    sized = build_strategy(load_config(overrides=["model.boundary=bpe", "strategy.vocab_size=400"]).model)
    with pytest.warns(UserWarning, match="boundaries per byte"):
        assert sized.fit([TRAIN_TEXT])["bpe_vocab_size"] == 400
    huge = build_strategy(load_config(overrides=["model.boundary=bpe", "strategy.vocab_size=200000"]).model)
    with pytest.raises(ConfigError, match="only supports a .*strategy.tokenizer=PATH"):
        huge.fit([TRAIN_TEXT])  # never a silently smaller vocabulary
    missing = build_strategy(load_config(overrides=["model.boundary=bpe", "strategy.tokenizer=nope.json"]).model)
    with pytest.raises(ConfigError, match="nope.json"):
        missing.fit([TRAIN_TEXT])


def test_paper_bpe_refuses_generation(models):
    with pytest.raises(ConfigError, match="cannot decide boundaries byte by byte"):
        generate(models["bpe"], "To be", max_bytes=4)


# ---------------------------------------------------------------- bpe-causal


def test_bpe_reference_starts_are_the_tokenizers_offsets(models):
    tok = models["bpe-causal"].strategy.tokenizer()
    for word in bpe_causal.split_pretokens(shakespeare(400)):
        enc = tok.encode(bpe_causal.to_chars(word))
        assert bpe_causal.token_starts(tok, word) == [s for s, _ in enc.offsets]
        assert "".join(enc.tokens) == bpe_causal.to_chars(word)


def test_bpe_causal_rule_mostly_agrees_with_the_tokenizer():
    """Boundaries of the causal greedy rule vs the tokenizer's own token starts on whole
    pre-tokens, on held-out text; and the rule is a pure function of the prefix. The BPE is fitted
    to 0.2 on its own training words, a larger vocabulary than the fixture's held-out fit reaches
    on this little text."""
    tok, _ = bpe_causal.fit_bpe(bpe_causal.sample_words([TRAIN_TEXT]), 0.2)
    prefixes = bpe_causal.token_prefixes(tok)
    agree = total = 0
    for word in bpe_causal.split_pretokens(shakespeare(5000, skip=200_000)):
        ref = [0] * len(word)
        for s in bpe_causal.token_starts(tok, word):
            ref[s] = 1
        got = bpe_causal.causal_word_starts(prefixes, word)
        agree += sum(int(g == r) for g, r in zip(got, ref))
        total += len(word)
        for i in range(1, len(word)):
            assert bpe_causal.causal_word_starts(prefixes, word[:i]) == got[:i]
    assert agree / total > 0.9


def test_bpe_forward_matches_word_rule(models):
    strategy = models["bpe-causal"].strategy
    text = shakespeare(200, skip=9000)
    a = strategy.boundaries(encode(text).unsqueeze(0))[0, 1:].tolist()
    prefixes = bpe_causal.token_prefixes(strategy.tokenizer())
    expected = [s for w in bpe_causal.split_pretokens(text) for s in bpe_causal.causal_word_starts(prefixes, w)]
    assert a == expected


def test_bpe_fit_reaches_rate_and_is_saved(models, tmp_path):
    strategy = models["bpe-causal"].strategy
    _, held = bpe_causal.split_held_out([TRAIN_TEXT])
    assert abs(bpe_causal.causal_rate(strategy.tokenizer(), bpe_causal.sample_words(held)) - 0.3) < 0.01
    models["bpe-causal"].save_pretrained(tmp_path)
    loaded = AUNet.from_pretrained(tmp_path)
    x = encode(shakespeare(100)).unsqueeze(0)
    assert torch.equal(loaded.strategy.boundaries(x), strategy.boundaries(x))


@hypothesis.given(st.lists(st.binary(max_size=40), max_size=6), st.floats(0.0, 1.0))
def test_bpe_held_out_split_is_the_sample_cut_once(documents, share):
    """The fit part and the held-out part are the sample in order, cut once at `share` of its
    bytes from the end: nothing lost, nothing in both."""
    fit, held = bpe_causal.split_held_out(documents, share)
    assert b"".join(fit) + b"".join(held) == b"".join(documents)
    assert len(b"".join(held)) == sum(map(len, documents)) - round(sum(map(len, documents)) * (1 - share))
    assert all(fit) and all(held)


def test_bpe_unreachable_rate_warns():
    strategy = build_strategy(ModelConfig(boundary="bpe-causal", target_rate=0.05))
    with pytest.warns(UserWarning, match=r"cannot reach boundary rate 0.05: .* gives 0\.2"):
        info = strategy.fit([b"the cat sat on the mat, " * 50 + b"a bb ccc dddd"])
    assert info["bpe_rate"] > 0.2  # every pre-token costs a boundary


# ---------------------------------------------------------------- entropy


def test_entropy_rate_near_target_after_warmup():
    cfg = ModelConfig(boundary="entropy", target_rate=0.2)
    strategy = EntropyBoundaries(cfg).train()
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, 100), generator=g)
    rates = []
    for _ in range(60):
        logits = torch.randn(4, 100, 64, generator=g) * torch.rand(4, 100, 1, generator=g) * 4
        out = strategy(None, x, early_logits=logits)
        rates.append(out.decisions[:, 1:].mean().item())
    assert abs(sum(rates[-20:]) / 20 - 0.2) < 0.02
    assert rates[0] == 1.0  # no threshold before the first update


def entropy_threshold_reference(thr: float, updates: int, entropy, x, rho: float, gain: float) -> tuple[float, int]:
    """The quantile tracker with the real bytes selected by a boolean index (a host sync on a
    GPU, which `update_threshold` avoids): the reference it is tested against."""
    values = entropy[:, :-1][is_byte(x[:, 1:])]
    if values.numel() == 0:
        return thr, updates
    if updates == 0:
        return float(torch.quantile(values, 1.0 - rho)), 1
    return thr + gain * (float((values > thr).float().mean()) - rho), updates + 1


def test_entropy_tracker_matches_the_plain_reference():
    strategy = EntropyBoundaries(ModelConfig(boundary="entropy", target_rate=0.2)).train()
    g = torch.Generator().manual_seed(3)
    thr, updates = 0.0, 0
    for step in range(6):
        x = torch.randint(0, 256, (3, 50), generator=g)
        x[:, 0] = BOS
        x[1, 30:] = PAD  # a short row
        if step == 2:
            x[:, 1:] = PAD  # a batch without a real byte: no update
        entropy = torch.rand(3, 50, generator=g) * 5
        strategy.update_threshold(entropy, x)
        thr, updates = entropy_threshold_reference(thr, updates, entropy, x, 0.2, strategy.opts.gain)
        assert int(strategy.updates) == updates
        assert float(strategy.thr) == pytest.approx(thr, abs=1e-5)


def test_entropy_rate_holds_while_entropy_falls():
    """The early head's entropy falls fast while it learns: the threshold must follow."""
    strategy = EntropyBoundaries(ModelConfig(boundary="entropy", target_rate=0.2)).train()
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (8, 200), generator=g)
    rates = []
    for step in range(300):
        scale = 6.0 * 0.99**step + 0.5  # sharper predictions over time
        logits = torch.randn(8, 200, 64, generator=g) * torch.rand(8, 200, 1, generator=g) * scale
        rates.append(strategy(None, x, early_logits=logits).decisions[:, 1:].mean().item())
    assert all(abs(sum(rates[i : i + 50]) / 50 - 0.2) < 0.03 for i in range(50, 300, 50)), rates[::25]


# ---------------------------------------------------------------- nawrot


@pytest.mark.parametrize("S_extra", [0, 3])
def test_mean_pool_matches_loop(S_extra):
    g = torch.Generator().manual_seed(S_extra)
    h = torch.randn(3, 40, 6, generator=g, dtype=torch.float64)
    a = (torch.rand(3, 40, generator=g) < 0.3).double()
    a[:, 0] = 1
    a[2, 30:] = 0  # trailing bytes after the last boundary: no token
    S = int(a.sum(1).max()) + S_extra
    torch.testing.assert_close(mean_pool(h, a, S), mean_pool_reference(h, a, S))


def test_mean_pool_gradient_is_nawrots():
    """d z_k / d a_j through the pooling weights: a boundary moved changes which segment a byte
    is averaged into. Against the analytic gradient of the weights w / sum(w) with
    w = 1 + (seg - stopgrad(seg)): dL/dw[k, t] = <dL/dz_k, h_t - z_k> / n_k, and
    dL/da_j = sum_{t > j} dL/dw[seg(t), t] (seg(t) counts a_j for t > j)."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(1, 12, 4, generator=g, dtype=torch.float64)
    a = torch.tensor([[1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1]], dtype=torch.float64, requires_grad=True)
    S = 5
    z = mean_pool(h, a, S)
    gz = torch.randn(z.shape, generator=g, dtype=torch.float64)
    (z * gz).sum().backward()
    seg = (a.detach().cumsum(1) - a.detach()).long()[0]
    zr, n = z.detach()[0], torch.bincount(seg, minlength=S + 1)[:S]
    dw = torch.stack(
        [
            (gz[0, k] * (h[0, t] - zr[k])).sum() / n[k] if k < S else torch.zeros((), dtype=h.dtype)
            for t, k in enumerate(seg.tolist())
        ]
    )  # (T,) dL/dw of each byte in its own token
    expected = torch.stack([dw[j + 1 :].sum() for j in range(12)])
    torch.testing.assert_close(a.grad[0], expected)


def test_nawrot_gradient_reaches_the_predictor_through_pooling():
    """With the prior off, the predictor's only gradient is the straight-through one inside the
    mean-pooling weights."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=32,
        n_heads=2,
        n_down=1,
        n_mid=1,
        n_up=1,
        attn_window=16,
        boundary="nawrot",
        target_rate=0.2,
        strategy={"temperature": 1.0, "prior_weight": 0.0},
    )
    model = AUNet(cfg)
    x = torch.stack([encode(shakespeare(64, skip=1000 + 64 * i)) for i in range(4)])
    out = model(x)
    assert out.aux_loss.item() == 0.0
    loss(out, x, ObjectiveConfig())[0].backward()
    assert model.strategy.mlp[2].weight.grad.abs().sum() > 0


def test_nawrot_tokens_are_segment_means():
    model = tiny("nawrot")
    x = encode(shakespeare(50)).unsqueeze(0)
    h = torch.randn(1, x.size(1), 32)
    out = model.strategy(h, x)
    S = int(out.decisions.sum())
    z, pos = model.chunker.down(h, out.decisions, out.relaxed, S)
    torch.testing.assert_close(z, mean_pool_reference(h, out.decisions, S))
    assert pos[0].tolist() == torch.nonzero(out.decisions[0]).flatten().tolist()


def test_binomial_log_prob_matches_torch():
    n, k = torch.tensor([50.0, 80.0]), torch.tensor([7.0, 30.0])
    ref = torch.distributions.Binomial(total_count=n, probs=torch.tensor(0.2)).log_prob(k)
    torch.testing.assert_close(binomial_log_prob(k, n, 0.2), ref)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_relaxed_bernoulli_hard_rate_is_p(temperature):
    logits = torch.full((200_000,), -1.0)
    s = relaxed_bernoulli(logits, torch.rand(200_000).clamp(1e-6, 1 - 1e-6), temperature)
    assert abs((s > 0.5).float().mean().item() - torch.sigmoid(torch.tensor(-1.0)).item()) < 0.005


# ---------------------------------------------------------------- hnet


@pytest.mark.parametrize("S", [1, 2, 7, 33])
def test_ema_scan_matches_loop(S):
    g = torch.Generator().manual_seed(S)
    z = torch.randn(3, S, 5, generator=g, dtype=torch.float64)
    p = torch.rand(3, S, generator=g, dtype=torch.float64)
    torch.testing.assert_close(ema_scan(z, p), ema_reference(z, p))


def test_ratio_loss_is_minimal_at_target():
    mask = torch.ones(1, 100)
    a = torch.zeros(1, 100)
    a[0, ::5] = 1
    at_target = ratio_loss(a, torch.full((1, 100), 0.2), mask, 0.2)
    torch.testing.assert_close(at_target, torch.tensor(1.0))
    p = torch.full((1, 100), 0.2, requires_grad=True)
    ratio_loss(a, p, mask, 0.2).backward()
    torch.testing.assert_close(p.grad.sum(), torch.tensor(0.0))  # stationary in G at F = 1/N
    assert ratio_loss(torch.ones(1, 100), torch.full((1, 100), 0.9), mask, 0.2) > at_target


def test_hnet_confidence_is_one_forward():
    model = tiny("hnet")
    x = encode(shakespeare(50)).unsqueeze(0)
    b = model.strategy(torch.randn(1, x.size(1), 32), x)
    z = torch.randn(1, int(b.decisions.sum()), 32)
    torch.testing.assert_close(model.chunker.up(z, b.decisions, b.probs), upsample(z, b.decisions))
