"""The options form: KubeSpawner field names in the HTML, and the posted form mapped to user_options."""

import unittest
from html.parser import HTMLParser

from tornado import web

from support import SpawnerTestCase, closed_port_url

from dsmlp_spawner.form import options_from_form, render_form

PROFILES = [
    {
        "slug": "cpu",
        "display_name": "CPU only",
        "description": "2 CPU, 8 GB <b>RAM</b> {{ 7 * 7 }}",
        "default": False,
        "profile_options": {},
    },
    {
        "slug": "gpu",
        "display_name": "One GPU",
        "description": "",
        "default": True,
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {
                    "scipy": {"display_name": "SciPy", "default": False},
                    "torch": {"display_name": "PyTorch", "default": True},
                },
                "unlisted_choice": {
                    "enabled": True,
                    "display_name": "Image name",
                    "display_name_in_choices": "Other image...",
                    "validation_regex": "^ghcr\\.io/.+$",
                    "validation_message": "Must come from ghcr.io",
                },
            },
            "gpus": {
                "display_name": "GPUs",
                "choices": {"1": {"display_name": "1"}, "2": {"display_name": "2"}},
                "unlisted_choice": {"enabled": False},
            },
        },
    },
]


class Fields(HTMLParser):
    """Fields collects the form controls of rendered HTML, as a browser would post them."""

    def __init__(self, html):
        super().__init__()
        self.inputs = {}  # name -> list of attr dicts
        self.selects = {}  # name -> {"options": [(value, label)], "selected": value, "attrs": {...}}
        self._select = None
        self._option = None
        self.texts = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input":
            self.inputs.setdefault(attrs.get("name"), []).append(attrs)
        elif tag == "select":
            self._select = {"options": [], "selected": None, "attrs": attrs}
            self.selects[attrs["name"]] = self._select
        elif tag == "option":
            self._option = attrs
            if "selected" in attrs:
                self._select["selected"] = attrs["value"]

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None

    def handle_data(self, data):
        if self._option is not None:
            self._select["options"].append((self._option["value"], data))
            self._option = None
        elif data.strip():
            self.texts.append(data.strip())


class TestRender(unittest.TestCase):
    def test_no_choice_no_form(self):
        self.assertEqual(render_form([]), "")
        self.assertEqual(render_form([{"slug": "only", "display_name": "Only"}]), "")
        self.assertEqual(render_form([{"slug": "only", "profile_options": {}}]), "")
        single = [{"slug": "only", "profile_options": PROFILES[1]["profile_options"]}]
        self.assertIn('name="profile-option-only--image"', render_form(single))

    def test_field_names(self):
        fields = Fields(render_form(PROFILES))
        radios = fields.inputs["profile"]
        self.assertEqual([(r["type"], r["value"]) for r in radios], [("radio", "cpu"), ("radio", "gpu")])
        self.assertEqual([r["value"] for r in radios if "checked" in r], ["gpu"])  # the default
        self.assertEqual(set(fields.selects), {"profile-option-gpu--image", "profile-option-gpu--gpus"})
        image = fields.selects["profile-option-gpu--image"]
        self.assertEqual(
            image["options"],
            [("scipy", "SciPy"), ("torch", "PyTorch"), ("unlisted-choice", "Other image...")],
        )
        self.assertEqual(image["selected"], "torch")
        self.assertEqual(fields.selects["profile-option-gpu--gpus"]["selected"], "1")
        self.assertNotIn("unlisted-choice", [v for v, _ in fields.selects["profile-option-gpu--gpus"]["options"]])
        (text,) = fields.inputs["profile-option-gpu--image--unlisted-choice"]
        self.assertEqual(text["type"], "text")
        self.assertEqual(text["pattern"], "^ghcr\\.io/.+$")
        self.assertEqual(text["title"], "Must come from ghcr.io")
        self.assertIn("disabled", text)  # until "Other image..." is picked
        self.assertNotIn("profile-option-gpu--gpus--unlisted-choice", fields.inputs)

    def test_text_is_escaped(self):
        html = render_form(PROFILES)
        self.assertNotIn("<b>", html)
        self.assertNotIn("{{", html)
        self.assertIn("2 CPU, 8 GB <b>RAM</b> {{ 7 * 7 }}", Fields(html).texts)

    def test_saved_options_are_preselected(self):
        saved = {"profile": "gpu", "image--unlisted-choice": "ghcr.io/me/img:1", "gpus": "2"}
        fields = Fields(render_form(PROFILES, saved))
        self.assertEqual(fields.selects["profile-option-gpu--image"]["selected"], "unlisted-choice")
        self.assertEqual(fields.selects["profile-option-gpu--gpus"]["selected"], "2")
        (text,) = fields.inputs["profile-option-gpu--image--unlisted-choice"]
        self.assertEqual(text["value"], "ghcr.io/me/img:1")
        self.assertNotIn("disabled", text)
        fields = Fields(render_form(PROFILES, {"profile": "cpu"}))
        self.assertEqual([r["value"] for r in fields.inputs["profile"] if "checked" in r], ["cpu"])
        fields = Fields(render_form(PROFILES, {"profile": "removed-since"}))
        self.assertEqual([r["value"] for r in fields.inputs["profile"] if "checked" in r], ["gpu"])


class TestOptionsFromForm(unittest.TestCase):
    def test_mapping(self):
        cases = {
            "nothing posted": ({}, {}),
            "profile without options": ({"profile": ["cpu"]}, {"profile": "cpu"}),
            "listed choices; other profiles' fields ignored": (
                {
                    "profile": ["gpu"],
                    "profile-option-gpu--image": ["scipy"],
                    "profile-option-gpu--gpus": ["2"],
                    "profile-option-cpu--image": ["x"],
                    "_xsrf": ["token"],
                },
                {"profile": "gpu", "image": "scipy", "gpus": "2"},
            ),
            "other picked, text typed": (
                {
                    "profile": ["gpu"],
                    "profile-option-gpu--image": ["unlisted-choice"],
                    "profile-option-gpu--image--unlisted-choice": ["ghcr.io/me/img:1"],
                },
                {"profile": "gpu", "image--unlisted-choice": "ghcr.io/me/img:1"},
            ),
            "KubeSpawner's form posts only the text": (
                {"profile": ["gpu"], "profile-option-gpu--image--unlisted-choice": ["ghcr.io/x"]},
                {"profile": "gpu", "image--unlisted-choice": "ghcr.io/x"},
            ),
            "listed choice wins over stale text": (
                {
                    "profile": ["gpu"],
                    "profile-option-gpu--image": ["torch"],
                    "profile-option-gpu--image--unlisted-choice": ["ghcr.io/x"],
                },
                {"profile": "gpu", "image": "torch"},
            ),
        }
        for name, (formdata, want) in cases.items():
            with self.subTest(name):
                self.assertEqual(options_from_form(formdata), want)

    def test_other_without_text_is_refused(self):
        with self.assertRaisesRegex(ValueError, "image"):
            options_from_form(
                {
                    "profile": ["gpu"],
                    "profile-option-gpu--image": ["unlisted-choice"],
                    "profile-option-gpu--image--unlisted-choice": [""],
                }
            )


class TestSpawnerForm(SpawnerTestCase):
    async def test_hub_api(self):
        self.fake.profiles = PROFILES
        spawner = self.spawner()
        # As the hub calls them (JupyterHub 3.0: get_options_form, run_options_from_form).
        html = await spawner.get_options_form()
        self.assertIn('name="profile-option-gpu--image--unlisted-choice"', html)
        self.assertEqual(self.fake.requests[-1].path, "/api/v1/profiles")
        posted = {"profile": ["gpu"], "profile-option-gpu--gpus": ["2"]}
        self.assertEqual(spawner.run_options_from_form(posted), {"profile": "gpu", "gpus": "2"})

        self.fake.profiles = PROFILES[:1]
        self.assertEqual(await spawner.get_options_form(), "")

    async def test_service_down(self):
        spawner = self.hub.spawner(closed_port_url())
        with self.assertRaises(web.HTTPError) as ctx:
            await spawner.get_options_form()
        self.assertEqual(ctx.exception.status_code, 503)


if __name__ == "__main__":
    unittest.main()
