"""Timeouts that agree: stop_wait below request_timeout, and the long start deadline for GPU profiles only."""

import unittest

from support import SpawnerTestCase, closed_port_url

CPU = {"slug": "cpu", "display_name": "CPU", "default": True, "gpu_class": ""}
GPU = {"slug": "gpu", "display_name": "GPU", "gpu_class": "a30"}
PICK = {
    "slug": "pick",
    "display_name": "Pick",
    "gpu_class": "",
    "profile_options": {
        "hw": {
            "display_name": "Hardware",
            "choices": {
                "cpu": {"display_name": "CPU", "default": True, "gpu_class": ""},
                "a5000": {"display_name": "A5000", "gpu_class": "a5000"},
            },
        }
    },
}


class TestStopWait(SpawnerTestCase):
    def test_refused_when_not_below_request_timeout(self):
        for stop_wait in (10, 12, 0):
            with self.subTest(stop_wait=stop_wait):
                with self.assertRaises(ValueError) as ctx:
                    self.spawner(request_timeout=10, stop_wait=stop_wait)
                self.assertIn(
                    "request_timeout (10 s) must be greater than RemoteKubeSpawner.stop_wait",
                    str(ctx.exception),
                )

    def test_default_is_half_the_request_timeout(self):
        self.assertEqual(self.spawner(request_timeout=10).stop_wait, 5)

    async def test_delete_sends_the_wait(self):
        spawner = self.spawner(request_timeout=10, stop_wait=4.5)
        await spawner.stop()
        self.assertEqual(self.fake.of("DELETE")[0].query, {"now": "false", "wait": "4.5s", "by": "hub"})


class TestStartDeadline(SpawnerTestCase):
    async def deadline(self, profiles, user_options, url=None):
        self.fake.profiles = profiles
        spawner = self.hub.spawner(url or self.fake.url)
        spawner.start_timeout = 120
        spawner.reservation_wait_timeout = 2400
        spawner.user_options = user_options
        await spawner.run_pre_spawn_hook()
        return spawner.start_timeout

    async def test_only_gpu_profiles_get_the_reservation_wait(self):
        cases = {
            "cpu profile chosen": ([CPU, GPU], {"profile": "cpu"}, 120),
            "default cpu profile": ([CPU, GPU], {}, 120),
            "gpu profile chosen": ([CPU, GPU], {"profile": "gpu"}, 2400),
            "cpu choice of an option": ([CPU, PICK], {"profile": "pick"}, 120),
            "gpu choice of an option": ([CPU, PICK], {"profile": "pick", "hw": "a5000"}, 2400),
            "no profiles": ([], {}, 120),
            # A spawnerd that does not report gpu_class: keep the GPU wait possible.
            "no gpu_class reported": ([{"slug": "cpu", "display_name": "CPU"}], {}, 2400),
        }
        for name, (profiles, options, want) in cases.items():
            with self.subTest(name):
                self.assertEqual(await self.deadline(profiles, options), want)

    async def test_unreachable_spawnerd_keeps_the_wait_possible(self):
        self.assertEqual(await self.deadline([], {}, url=closed_port_url()), 2400)

    async def test_gpu_then_cpu_spawn_goes_back_to_start_timeout(self):
        self.fake.profiles = [CPU, GPU]
        spawner = self.spawner()
        spawner.start_timeout = 120
        spawner.reservation_wait_timeout = 2400
        spawner.user_options = {"profile": "gpu"}
        await spawner.run_pre_spawn_hook()
        self.assertEqual(spawner.start_timeout, 2400)
        spawner.user_options = {"profile": "cpu"}
        await spawner.run_pre_spawn_hook()
        self.assertEqual(spawner.start_timeout, 120)

    async def test_async_pre_spawn_hook_is_awaited(self):
        ran = []

        async def hook(spawner):
            ran.append(spawner.start_timeout)

        self.fake.profiles = [CPU]
        spawner = self.spawner(pre_spawn_hook=hook)
        spawner.start_timeout = 120
        await spawner.run_pre_spawn_hook()
        self.assertEqual(ran, [120])


if __name__ == "__main__":
    unittest.main()
