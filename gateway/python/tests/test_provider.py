"""Provider declarations and records."""

import pytest

import blockether.vis.extension as vis
from blockether.vis.extension import _provider


def cred():
    return vis.ProviderCredential("sk-secret-123", api_url="https://api.acme.test/v1",
                                  llm_headers={"X-Key": "hdr-secret"})


def test_provider_requires_id_and_label():
    with pytest.raises(ValueError, match="id"):
        vis.Provider(" ", "Acme")
    with pytest.raises(ValueError, match="label"):
        vis.Provider("acme", "")


def test_a_raw_dict_preset_is_refused():
    with pytest.raises(TypeError, match="preset"):
        vis.Provider("acme", "Acme", preset={"base_url": "https://x"})


def test_an_async_slot_is_refused_naming_the_slot():
    async def get_token():
        return None
    with pytest.raises(TypeError, match="vis.Provider get_token_fn"):
        vis.Provider("acme", "Acme", get_token_fn=get_token)


def test_a_slot_with_an_incompatible_arity_is_refused():
    with pytest.raises(TypeError, match="vis.Provider status_fn"):
        vis.Provider("acme", "Acme", status_fn=lambda a, b: None)
    with pytest.raises(TypeError, match="enrich_models_fn"):
        vis.Provider("acme", "Acme", enrich_models_fn=lambda one: None)
    with pytest.raises(TypeError):
        vis.Provider("acme", "Acme", is_managed=1)


def test_a_get_token_fn_returning_a_dict_is_refused_naming_the_slot():
    p = vis.Provider("acme", "Acme", get_token_fn=lambda: {"token": "x"})
    with pytest.raises(TypeError, match="vis.Provider get_token_fn must return"):
        p.call_slot("get_token_fn")


def test_typed_slot_results_pass_through():
    c = cred()
    p = vis.Provider("acme", "Acme", get_token_fn=lambda: c,
                     status_fn=lambda: vis.ProviderStatus(True, label="Acme"),
                     limits_fn=lambda: vis.ProviderLimits(rpm=60),
                     enrich_models_fn=lambda provider, opts: [vis.ProviderModel("m", 8192)],
                     auth_prompt_fn=lambda: ["Paste a key."])
    assert p.call_slot("get_token_fn") is c
    assert p.call_slot("status_fn").is_authenticated is True
    assert p.call_slot("limits_fn").rpm == 60
    assert p.call_slot("enrich_models_fn", {}, {})[0].context == 8192
    assert p.call_slot("auth_prompt_fn") == ["Paste a key."]
    assert p.call_slot("detect_fn") is None
    assert p.slots == ("get_token_fn", "status_fn", "limits_fn", "auth_prompt_fn",
                       "enrich_models_fn")


def test_a_one_argument_refresh_receives_the_rejected_token_and_a_zero_argument_one_does_not():
    seen = []

    def refresh(rejected):
        seen.append(rejected)
        return cred()
    vis.Provider("a", "A", refresh_token_fn=refresh).call_slot("refresh_token_fn", "old")
    assert seen == ["old"]
    calls = []
    vis.Provider("a", "A", refresh_token_fn=lambda: calls.append(1)).call_slot(
        "refresh_token_fn", "old")
    assert calls == [1]


def test_a_refresh_that_raises_is_not_retried():
    calls = []

    def refresh(rejected):
        calls.append(rejected)
        raise RuntimeError("401 again")
    p = vis.Provider("a", "A", refresh_token_fn=refresh)
    with pytest.raises(RuntimeError):
        p.call_slot("refresh_token_fn", "t")
    assert calls == ["t"]


def test_a_slot_returning_a_coroutine_is_closed_and_refused():
    import inspect

    async def later():
        return None
    made = []

    def get_token():
        coro = later()
        made.append(coro)
        return coro
    p = vis.Provider("a", "A", get_token_fn=get_token)
    with pytest.raises(TypeError, match="coroutine"):
        p.call_slot("get_token_fn")
    assert inspect.getcoroutinestate(made[0]) == "CORO_CLOSED"


def test_provider_limits_default_wire_shape():
    assert vis.ProviderLimits().to_wire() == {"status": "ok", "static": {},
                                              "dynamic": {"limits": []}}


def test_provider_limits_wire_places_rpm_tpm_under_static_and_limits_note_under_dynamic():
    window = vis.ProviderLimitWindow("rolling", "minute", 1, 1700000000000)
    limit = vis.ProviderLimit("req", "Requests", "account", "requests", "exact",
                              "provider-api", used=3, limit=60, window=window)
    wire = vis.ProviderLimits(status="ok", limits=[limit], rpm=60, tpm=1000, note="n",
                              provider_id="acme", fetched_at_ms=5).to_wire()
    assert wire == {"status": "ok", "static": {"rpm": 60, "tpm": 1000},
                    "dynamic": {"limits": [{
                        "id": "req", "label": "Requests", "scope": "account",
                        "kind": "requests", "precision": "exact", "source": "provider-api",
                        "is_unlimited": False, "used": 3, "limit": 60,
                        "window": {"kind": "rolling", "unit": "minute", "size": 1,
                                   "resets_at_ms": 1700000000000}}], "note": "n"},
                    "provider_id": "acme", "fetched_at_ms": 5}


@pytest.mark.parametrize("build", [
    lambda: vis.ProviderLimits(status="great"),
    lambda: vis.ProviderLimits(rpm=-1),
    lambda: vis.ProviderLimit("i", "l", scope="galaxy"),
    lambda: vis.ProviderLimit("i", "l", kind="apples"),
    lambda: vis.ProviderLimit("i", "l", used=float("inf")),
    lambda: vis.ProviderLimitWindow("rolling", "fortnight"),
    lambda: vis.ProviderLimitWindow("rolling", "day", 0),
    lambda: vis.ProviderModel("m", 0),
    lambda: vis.ProviderError("t", " "),
    lambda: vis.ProviderCredential(""),
])
def test_provider_record_vocabularies_are_checked(build):
    with pytest.raises(ValueError):
        build()


def test_credential_and_preset_reprs_never_show_secrets():
    preset = vis.ProviderPreset(base_url="https://x", llm_headers={"Authorization": "hdr-secret"})
    for text in (repr(cred()), repr(preset)):
        assert "sk-secret-123" not in text and "hdr-secret" not in text


def test_an_unknown_api_style_names_no_wire_dialect_and_lists_the_accepted_names():
    with pytest.raises(ValueError, match="provider api_style names no wire dialect") as e:
        vis.ProviderPreset(api_style="telepathy")
    assert "accepted: anthropic, anthropic-messages" in str(e.value)
    assert "openai-compatible" in str(e.value) and "google-gemini" in str(e.value)
    assert _provider.dialect_of("openai_compatible") == "openai-chat"
    assert _provider.dialect_of("claude") == "anthropic-messages"
    assert _provider.dialect_of("responses") == "openai-responses"
    assert _provider.dialect_of("google-gemini") == "gemini"


@pytest.mark.parametrize("style", ["OpenAI", "OpenAI_Compatible", "Anthropic", "CHAT"])
def test_api_style_names_are_lower_case_exactly(style):
    with pytest.raises(ValueError, match="names no wire dialect"):
        vis.ProviderPreset(api_style=style)
    with pytest.raises(ValueError, match="names no wire dialect"):
        vis.ProviderCredential("tok", api_style=style)


def test_the_gateway_names_the_dialects_it_does_not_drive():
    assert _provider.gateway_dialect_error("p", "openai-compatible") is None
    assert _provider.gateway_dialect_error("p", "claude") is None
    assert _provider.gateway_dialect_error("p", None) is None
    message = _provider.gateway_dialect_error("vis.Provider 'g' preset", "gemini")
    assert message.startswith("vis.Provider 'g' preset api_style 'gemini' names the gemini "
                              "dialect, which this gateway does not drive; accepted: anthropic")
    assert "chat-completions" in message and "google" not in message.split("accepted:")[1]
    assert "openai-responses" in _provider.gateway_dialect_error("p", "responses")


def test_preset_default_models_refuses_a_bare_string_and_extra_body_is_frozen():
    with pytest.raises(TypeError):
        vis.ProviderPreset(default_models="gpt-x")
    body = {"options": {"temperature": 0}, "stop": ["a"]}
    preset = vis.ProviderPreset(default_models=["m1"], extra_body=body)
    body["options"]["temperature"] = 1
    with pytest.raises(TypeError):
        preset.extra_body["options"]["temperature"] = 2
    assert preset.to_wire() == {"default_models": ["m1"],
                                "extra_body": {"options": {"temperature": 0}, "stop": ["a"]}}
    with pytest.raises(TypeError):
        vis.ProviderPreset(extra_body={"f": object()})


@pytest.mark.parametrize("body", [{1: "x"}, {"a": {2: "y"}}, {"a": [float("nan")]},
                                  {"a": float("inf")}, {"a": {"b", "c"}}])
def test_extra_body_must_be_portable_json(body):
    with pytest.raises(TypeError, match="portable JSON"):
        vis.ProviderPreset(extra_body=body)


def test_preset_extra_keys_must_not_shadow_declared_fields_and_merge_into_the_wire_form():
    with pytest.raises(ValueError, match="shadows"):
        vis.ProviderPreset(extra={"base-url": "x"})
    with pytest.raises(TypeError):
        vis.ProviderPreset(extra={3: "x"})
    wire = vis.ProviderPreset(base_url="https://x", extra={"region": "eu"}).to_wire()
    assert wire == {"base_url": "https://x", "default_models": [], "region": "eu"}
    assert vis.ProviderPreset(is_hidden=True).to_wire()["is_hidden"] is True


@pytest.mark.parametrize("build", [
    lambda: vis.ProviderStatus(True, extra={"is_authenticated": False}),
    lambda: vis.ProviderStatus(True, extra={"base-url": "x"}),
    lambda: vis.ProviderModel("m", extra={"is_tool_call": True}),
])
def test_status_and_model_extra_may_not_shadow_a_field(build):
    with pytest.raises(ValueError, match="shadows"):
        build()


def test_status_and_model_extra_merge_into_the_wire_form():
    assert vis.ProviderStatus(True, label="A", extra={"plan": "pro"}).to_wire() == {
        "is_authenticated": True, "label": "A", "plan": "pro"}
    assert vis.ProviderModel("m", 8, extra={"family": "x"}).to_wire() == {
        "name": "m", "context": 8, "family": "x"}


def test_a_limit_window_needs_no_unit():
    assert vis.ProviderLimitWindow("rolling").to_wire() == {"kind": "rolling", "size": 1}
    assert vis.ProviderLimitWindow("lifetime").unit is None
    assert vis.ProviderLimitWindow("calendar", "month").to_wire() == {
        "kind": "calendar", "unit": "month", "size": 1}


def test_provider_wire_form_lists_filled_slots():
    p = vis.Provider("acme", "Acme", preset=vis.ProviderPreset(base_url="https://x"),
                     get_token_fn=lambda: None)
    assert p.to_wire() == {"id": "acme", "label": "Acme",
                           "preset": {"base_url": "https://x", "default_models": []},
                           "is_managed": False, "slots": ["get_token_fn"]}
