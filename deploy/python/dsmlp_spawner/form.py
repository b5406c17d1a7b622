"""The KubeSpawner-style profile form: HTML from spawnerd's profiles, user_options from the posted form.

Field names are KubeSpawner's, so saved user_options, REST callers and
custom templates keep working: ``profile``, ``profile-option-{slug}--{opt}``
and ``profile-option-{slug}--{opt}--unlisted-choice``.
"""

import html

UNLISTED = "unlisted-choice"
UNLISTED_SUFFIX = "--" + UNLISTED
DEFAULT_OTHER_LABEL = "Other..."


def _esc(value):
    # Braces are escaped too: later hubs may pass the form through Jinja, and
    # profile text must never be evaluated as a template.
    text = html.escape(str(value if value is not None else ""), quote=True)
    return text.replace("{", "&#123;").replace("}", "&#125;")


def _first(values):
    if isinstance(values, (list, tuple)):
        return values[0] if values else None
    return values


def needs_form(profiles):
    """needs_form is false when there is nothing to choose: no profile, or one without options."""
    if not profiles:
        return False
    return len(profiles) > 1 or bool(profiles[0].get("profile_options"))


def _selected_profile(profiles, user_options):
    slugs = [p.get("slug") for p in profiles]
    saved = user_options.get("profile")
    if saved in slugs:
        return saved
    for p in profiles:
        if p.get("default"):
            return p.get("slug")
    return slugs[0]


def _selected_choice(option, opt, saved):
    """_selected_choice returns (choice key or UNLISTED, unlisted text) to pre-select."""
    unlisted = option.get("unlisted_choice") or {}
    typed = saved.get(opt + UNLISTED_SUFFIX)
    if typed and unlisted.get("enabled"):
        return UNLISTED, typed
    choices = option.get("choices") or {}
    if saved.get(opt) in choices:
        return saved[opt], ""
    for key, choice in choices.items():
        if (choice or {}).get("default"):
            return key, ""
    if choices:
        return next(iter(choices)), ""
    return (UNLISTED, "") if unlisted.get("enabled") else ("", "")


def _render_option(slug, opt, option, saved):
    name = f"profile-option-{slug}--{opt}"
    unlisted = option.get("unlisted_choice") or {}
    selected, typed = _selected_choice(option, opt, saved)
    out = [
        '<div class="form-group dsmlp-option">',
        f'<label for="{_esc(name)}">{_esc(option.get("display_name") or opt)}</label>',
        f'<select class="form-control" id="{_esc(name)}" name="{_esc(name)}" '
        f'data-profile="profile-item-{_esc(slug)}">',
    ]
    for key, choice in (option.get("choices") or {}).items():
        mark = " selected" if key == selected else ""
        label = (choice or {}).get("display_name") or key
        out.append(f'<option value="{_esc(key)}"{mark}>{_esc(label)}</option>')
    if unlisted.get("enabled"):
        mark = " selected" if selected == UNLISTED else ""
        label = unlisted.get("display_name_in_choices") or DEFAULT_OTHER_LABEL
        out.append(f'<option value="{UNLISTED}"{mark}>{_esc(label)}</option>')
    out.append("</select>")
    if unlisted.get("enabled"):
        shown = selected == UNLISTED
        field = name + UNLISTED_SUFFIX
        attrs = [
            'type="text"',
            'class="form-control"',
            f'id="{_esc(field)}"',
            f'name="{_esc(field)}"',
            f'value="{_esc(typed)}"',
        ]
        if unlisted.get("validation_regex"):
            attrs.append(f'pattern="{_esc(unlisted["validation_regex"])}"')
        if unlisted.get("validation_message"):
            attrs.append(f'title="{_esc(unlisted["validation_message"])}"')
        if not shown:
            # Disabled fields are neither validated nor posted.
            attrs.append("disabled")
        out.append(f'<div class="dsmlp-unlisted"{"" if shown else " hidden"}>')
        out.append(f'<label for="{_esc(field)}">{_esc(unlisted.get("display_name") or opt)}</label>')
        out.append(f"<input {' '.join(attrs)}>")
        out.append("</div>")
    out.append("</div>")
    return out


# _SCRIPT shows the free-text field when "Other..." is picked and selects a
# profile's radio button when one of its options is touched.
_SCRIPT = """<script>
(function () {
  var root = document.getElementById("dsmlp-profile-list");
  if (!root) { return; }
  function sync(select) {
    var input = document.getElementById(select.id + "--unlisted-choice");
    if (!input) { return; }
    var on = select.value === "unlisted-choice";
    input.disabled = !on;
    input.parentNode.hidden = !on;
  }
  function pick(select) {
    var radio = document.getElementById(select.getAttribute("data-profile"));
    if (radio) { radio.checked = true; }
  }
  Array.prototype.forEach.call(root.querySelectorAll("select"), function (select) {
    sync(select);
    select.addEventListener("change", function () { sync(select); pick(select); });
    select.addEventListener("focus", function () { pick(select); });
  });
})();
</script>"""


def render_form(profiles, user_options=None):
    """render_form returns the options form HTML, or "" when there is nothing to choose.

    ``user_options`` (the last spawn's, as the hub keeps them) pre-selects the
    profile and its choices.
    """
    if not needs_form(profiles):
        return ""
    saved = user_options or {}
    chosen = _selected_profile(profiles, saved)
    out = ['<div class="form-group" id="dsmlp-profile-list">']
    for profile in profiles:
        slug = profile.get("slug") or ""
        item = f"profile-item-{slug}"
        mark = " checked" if slug == chosen else ""
        out.append('<div class="dsmlp-profile">')
        out.append(
            f'<input type="radio" name="profile" id="{_esc(item)}" value="{_esc(slug)}"{mark}>'
        )
        out.append(f'<label for="{_esc(item)}">{_esc(profile.get("display_name") or slug)}</label>')
        if profile.get("description"):
            out.append(f'<p class="dsmlp-description">{_esc(profile["description"])}</p>')
        mine = saved if slug == chosen else {}
        for opt, option in (profile.get("profile_options") or {}).items():
            out.extend(_render_option(slug, opt, option or {}, mine))
        out.append("</div>")
    out.append("</div>")
    out.append(_SCRIPT)
    return "\n".join(out)


def options_from_form(formdata):
    """options_from_form turns posted form lists into KubeSpawner's user_options.

    ``{"profile": ["a"], "profile-option-a--image": ["x"]}`` becomes
    ``{"profile": "a", "image": "x"}``; a free-text entry becomes
    ``{"image--unlisted-choice": text}``. Fields of other profiles are ignored.
    When a select says "Other...", its text field must not be empty.
    """
    slug = _first(formdata.get("profile"))
    if not slug:
        return {}
    options = {"profile": slug}
    prefix = f"profile-option-{slug}--"
    chosen, typed = {}, {}
    for key, values in formdata.items():
        if not key.startswith(prefix):
            continue
        value = _first(values)
        if value is None:
            continue
        name = key[len(prefix):]
        if name.endswith(UNLISTED_SUFFIX):
            typed[name[: -len(UNLISTED_SUFFIX)]] = value
        else:
            chosen[name] = value
    for name, value in chosen.items():
        if value != UNLISTED:
            options[name] = value
        elif typed.get(name):
            options[name + UNLISTED_SUFFIX] = typed[name]
        else:
            raise ValueError(f"{name}: type a value for the other choice")
    for name, text in typed.items():
        # KubeSpawner's own form posts only the text field when "Other..." is picked.
        if name not in chosen and text:
            options[name + UNLISTED_SUFFIX] = text
    return options
