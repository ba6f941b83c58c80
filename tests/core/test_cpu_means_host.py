"""`CPUExecutionProvider` means the host: providers that serve CPU requests run ahead of the
numpy kernels when a session asks for the CPU (by name, by default, or as the implicit
fallback); `get_providers()` keeps what was asked for; one switch keeps numpy only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import turnout
from turnout.engine.provider_selection import CPU_NUMPY_ONLY_ENV, CPU_NUMPY_ONLY_KEY
from turnout.engine.tiers import WAIT_ENV
from turnout.graph.errors import EPFail, FallbackError, InvalidArgument
from turnout.sdk import plugins
from turnout.sdk.provider import (
    Capability,
    Decline,
    ExecutionProvider,
    KernelDef,
    KernelNode,
    ProviderFactory,
)
from turnout_testbed.fake_device import FakeDeviceProviderFactory

pytestmark = pytest.mark.cpu_means_host

HOST = "FakeHostExecutionProvider"
CPU = "CPUExecutionProvider"


class FakeHostProvider(ExecutionProvider):
    """Claims Neg and Relu with numpy kernels of its own; declines the rest. With the option
    `fail`, its kernels raise `EPFail` (a provider failure at run time)."""

    name = HOST

    def _get_capability(self, graph: Any) -> tuple[list[Capability], list[Decline]]:
        claims, declines = [], []
        for node in graph.unassigned_nodes():
            if node.op_type in ("Neg", "Relu"):
                fn = np.negative if node.op_type == "Neg" else _relu

                def factory(
                    kn: KernelNode, _fn: Any = fn, _fail: bool = "fail" in self.options
                ) -> Any:
                    def run(x: np.ndarray) -> tuple[np.ndarray]:
                        if _fail:
                            raise EPFail(f"{HOST}: device lost")
                        return (_fn(x),)

                    return run

                claims.append(Capability((node.name,), KernelDef(node.op_type, "", 1, factory)))
            else:
                declines.append(Decline(node.name, "fake host: not Neg or Relu"))
        return claims, declines


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


class FakeHostFactory(ProviderFactory):
    name = HOST
    aliases = ("fakehost",)
    default_priority = 50
    serves_cpu_requests = True
    option_names = frozenset({"intra_op_num_threads", "fail"})

    def _create(self, options: dict[str, Any]) -> ExecutionProvider:
        return FakeHostProvider(options)


@pytest.fixture(autouse=True)
def _hosts_placed_at_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about where the host places nodes, so sessions wait for the compiled
    tier at creation (tests/core/test_tiers.py covers the numpy tier that runs before it)."""
    monkeypatch.setenv(WAIT_ENV, "1")


@pytest.fixture
def host() -> Iterator[FakeHostFactory]:
    factory = FakeHostFactory()
    others = [f for f in plugins.registry.all() if f.serves_cpu_requests]
    for f in others:  # only the fake serves CPU requests here (turnout-numba may be installed)
        plugins.registry.unregister(f.name)
    turnout.register_provider(factory)
    yield factory
    plugins.registry.unregister(factory.name)
    for f in others:
        turnout.register_provider(f)


def _model() -> onnx.ModelProto:
    """Neg -> Abs -> Relu: the host takes Neg and Relu, the numpy kernels Abs."""
    nodes = [
        helper.make_node("Neg", ["x"], ["a"], name="neg"),
        helper.make_node("Abs", ["a"], ["b"], name="abs"),
        helper.make_node("Relu", ["b"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _placed(sess: turnout.InferenceSession) -> dict[str, str]:
    return {a.node: a.provider for a in sess.partition_report().assignments}


X = np.array([-2, -1, 1, 2], np.float32)


@pytest.mark.parametrize("providers", [[CPU], ["cpu"], None], ids=["by-name", "alias", "default"])
def test_cpu_request_runs_on_the_host(host: FakeHostFactory, providers: Any) -> None:
    sess = turnout.InferenceSession(_model(), providers=providers)
    assert _placed(sess) == {"neg": HOST, "abs": CPU, "relu": HOST}
    assert sess.get_providers() == [CPU]
    report = sess.partition_report()
    assert report.hosts == [HOST]
    assert report.fallbacks(CPU) == []  # the host is the CPU here, not a fallback
    assert f"{HOST} serving {CPU}" in report.to_text()
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.abs(X))


def test_config_entry_keeps_numpy_only(host: FakeHostFactory) -> None:
    so = turnout.SessionOptions()
    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")
    sess = turnout.InferenceSession(_model(), so, providers=[CPU])
    assert set(_placed(sess).values()) == {CPU}
    assert sess.partition_report().hosts == []


def test_testing_reference_session_keeps_the_numpy_kernels(host: FakeHostFactory) -> None:
    """`turnout.tools.testing.cpu_session` is what providers' kernels are compared with: it must not
    run on the host provider under test."""
    from turnout.tools.testing import cpu_session

    sess = cpu_session(_model())
    assert set(_placed(sess).values()) == {CPU}
    assert sess.partition_report().hosts == []


def test_environment_keeps_numpy_only_and_config_wins(
    host: FakeHostFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CPU_NUMPY_ONLY_ENV, "1")
    assert set(_placed(turnout.InferenceSession(_model())).values()) == {CPU}
    so = turnout.SessionOptions()
    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "0")
    assert _placed(turnout.InferenceSession(_model(), so))["neg"] == HOST


@pytest.mark.parametrize("raw", ["2", "maybe"])
def test_bad_switch_value_is_a_clear_error(host: FakeHostFactory, raw: str) -> None:
    so = turnout.SessionOptions()
    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, raw)
    with pytest.raises(InvalidArgument, match=CPU_NUMPY_ONLY_KEY):
        turnout.InferenceSession(_model(), so)


def test_asked_by_name_the_host_is_a_provider_like_any(host: FakeHostFactory) -> None:
    sess = turnout.InferenceSession(_model(), providers=["fakehost", CPU])
    assert sess.get_providers() == [HOST, CPU]
    assert sess.partition_report().hosts == []
    assert _placed(sess)["neg"] == HOST


def test_session_threads_reach_the_host(host: FakeHostFactory) -> None:
    so = turnout.SessionOptions()
    so.intra_op_num_threads = 1
    sess = turnout.InferenceSession(_model(), so, providers=[CPU])
    (provider,) = [p for p in sess._engine.providers if p.name == HOST]
    assert provider.options == {"intra_op_num_threads": 1}
    assert sess.get_provider_options() == {CPU: {"intra_op_num_threads": "1"}}


def test_host_nodes_count_as_fallback_behind_a_requested_provider(host: FakeHostFactory) -> None:
    """Asked for a device provider, nodes it declines that land on the host are fallbacks:
    policy "error" must still refuse them, naming the node."""
    fake = FakeDeviceProviderFactory(ops=("Relu",))
    turnout.register_provider(fake)
    try:
        so = turnout.SessionOptions()
        so.fallback = "error"
        with pytest.raises(FallbackError, match=r"neg \(Neg\)"):
            turnout.InferenceSession(_model(), so, providers=[fake.name])
        so.fallback = "allow"
        sess = turnout.InferenceSession(_model(), so, providers=[fake.name])
        assert _placed(sess) == {"neg": HOST, "abs": CPU, "relu": fake.name}
        assert sess.get_providers() == [fake.name, CPU]
        fell = {node for node, _, _ in sess.partition_report().fallbacks(CPU)}
        assert fell == {"neg", "abs"}
    finally:
        plugins.registry.unregister(fake.name)


def test_installed_numba_serves_cpu_requests() -> None:
    """With turnout-numba installed (as CI installs it), a CPU session runs numba kernels and
    agrees with the numpy kernels."""
    factory = plugins.registry.find("NumbaExecutionProvider")
    if factory is None or not plugins.registry.probe(factory).ok:
        pytest.skip("turnout-numba is not installed or numba cannot load here")
    from turnout_testbed import zoo

    model = zoo.small_classifier().SerializeToString()
    x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    sess = turnout.InferenceSession(model, providers=[CPU])
    assert sess.partition_report().hosts == ["NumbaExecutionProvider"]
    assert "numba" in {a.source for a in sess.partition_report().assignments}
    so = turnout.SessionOptions()
    so.add_session_config_entry(CPU_NUMPY_ONLY_KEY, "1")
    numpy_only = turnout.InferenceSession(model, so, providers=[CPU])
    np.testing.assert_allclose(
        sess.run(None, {"x": x})[0], numpy_only.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6
    )


def test_run_time_fallback_rebuilds_on_the_numpy_kernels(
    host: FakeHostFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host provider that fails at run time is what the retry must leave out."""
    monkeypatch.setattr(FakeHostFactory, "_create", lambda self, o: FakeHostProvider({"fail": 1}))
    sess = turnout.InferenceSession(_model(), providers=[CPU])
    assert _placed(sess)["neg"] == HOST
    with pytest.warns(UserWarning, match="falling back"):
        (y,) = sess.run(None, {"x": X})
    np.testing.assert_array_equal(y, np.abs(X))
    assert set(_placed(sess).values()) == {CPU}


def test_session_threads_hold_blas_during_the_run(host: FakeHostFactory) -> None:
    """intra_op_num_threads=1 keeps numpy's BLAS on one thread while the session runs (as
    onnxruntime's CPU provider runs on one), and gives the previous count back after."""
    pytest.importorskip("threadpoolctl", reason="it sets BLAS's thread count")
    from turnout.engine.tiers import stop_all_builds
    from turnout.sdk.blas_threads import _blas_controls

    stop_all_builds()  # an earlier test's warm-up run would hold BLAS's count too

    def blas_threads() -> set[int]:
        """numpy's BLAS (the libraries found at the first session), read from the library: a
        second BLAS that a later import loads is not one the session's products call."""
        return {get() for get, _ in _blas_controls()}

    before = blas_threads()
    if not before:
        pytest.skip("no BLAS library is loaded in this process")
    seen: list[set[int]] = []
    monkey = FakeHostProvider._get_capability

    def spying(self: FakeHostProvider, graph: Any) -> tuple[list[Capability], list[Decline]]:
        claims, declines = monkey(self, graph)
        for c in claims:
            assert c.kernel is not None
            inner = c.kernel.factory

            def factory(kn: KernelNode, _inner: Any = inner) -> Any:
                fn = _inner(kn)

                def run(x: np.ndarray) -> Any:
                    seen.append(blas_threads())
                    return fn(x)

                return run

            object.__setattr__(c.kernel, "factory", factory)
        return claims, declines

    so = turnout.SessionOptions()
    so.intra_op_num_threads = 1
    try:
        FakeHostProvider._get_capability = spying  # type: ignore[method-assign]
        sess = turnout.InferenceSession(_model(), so, providers=[CPU])
        sess.run(None, {"x": X})
    finally:
        FakeHostProvider._get_capability = monkey  # type: ignore[method-assign]
    assert seen and all(s == {1} for s in seen)
    assert blas_threads() == before


def test_providers_command_says_which_serve_cpu_requests(
    host: FakeHostFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    from turnout.tools.cli import main

    assert main(["providers"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line}
    assert lines[HOST].endswith("serves CPUExecutionProvider requests")
    assert "serves" not in lines[CPU]
