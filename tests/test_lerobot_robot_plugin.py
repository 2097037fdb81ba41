"""``--robot.type=demofactory`` (plugins/lerobot_robot_demofactory) on a tiny model:
connect / observe / act / disconnect, lerobot's keyboard teleoperator driven with synthetic
key events, other teleoperators' actions mapped to the 2-D target, and lerobot-record's
own loop writing a dataset recorded inside the model."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import write_tiny_model_dir

pytest.importorskip("lerobot.robots.robot")

from lerobot.robots.utils import make_robot_from_config
from lerobot.utils.errors import DeviceNotConnectedError
from lerobot_robot_demofactory import DemofactoryRobot, DemofactoryRobotConfig
from lerobot_robot_demofactory.mapping import TargetMapper, TargetMapping

from exporters.lerobot_plugin import PluginInputError


class Key(enum.Enum):
    """Stands in for ``pynput.keyboard.Key`` (not installed headless): ``str(Key.up)`` is
    ``"Key.up"``, as pynput's is."""

    up = 1
    down = 2
    left = 3
    right = 4


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model")


def make_robot(tiny_dir: Path, tmp_path: Path, **kw: Any) -> DemofactoryRobot:
    kw = {"threads": 0, **kw}  # leave the test process's torch threads alone
    cfg = DemofactoryRobotConfig(
        model=str(tiny_dir), device="cpu", calibration_dir=tmp_path / "calib", **kw
    )
    robot = make_robot_from_config(cfg)  # lerobot's own factory finds the class by name
    assert isinstance(robot, DemofactoryRobot)
    return robot


def test_connect_observe_act_disconnect(tiny_dir: Path, tmp_path: Path) -> None:
    robot = make_robot(tiny_dir, tmp_path, image_height=48, image_width=48)
    assert robot.action_features == {"x": float, "y": float}
    assert robot.observation_features == {"agent_x": float, "agent_y": float, "image": (48, 48, 3)}
    with pytest.raises(DeviceNotConnectedError):
        robot.get_observation()
    robot.connect()
    assert robot.is_connected and robot.is_calibrated
    obs = robot.get_observation()
    assert set(obs) == set(robot.observation_features)
    assert obs["image"].shape == (48, 48, 3) and obs["image"].dtype == np.uint8
    action = {"x": 300.0, "y": 700.0}
    sent = robot.send_action(action)
    assert sent == {"x": 300.0, "y": 512.0} and action == sent  # clipped; rewritten in place
    after = robot.get_observation()
    assert not np.array_equal(after["image"], obs["image"])
    robot.disconnect()
    assert not robot.is_connected
    with pytest.raises(DeviceNotConnectedError):
        robot.send_action({"x": 1.0, "y": 1.0})


def test_resets_to_next_seed_after_max_steps(tiny_dir: Path, tmp_path: Path) -> None:
    robot = make_robot(tiny_dir, tmp_path, max_steps=2, seed=4)
    robot.connect()
    first = robot.get_observation()["image"]
    robot.send_action({"x": 100.0, "y": 100.0})
    robot.send_action({"x": 100.0, "y": 100.0})
    assert robot.resets == 2 and robot.steps == 0
    other = make_robot(tiny_dir, tmp_path, seed=5)
    other.connect()
    assert np.array_equal(robot.get_observation()["image"], other.get_observation()["image"])
    assert not np.array_equal(first, other.get_observation()["image"])


def test_lerobot_keyboard_teleop_with_synthetic_events(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lerobot.teleoperators.keyboard import teleop_keyboard as tk

    # pynput is not installed and there is no display: skip its import check and listener,
    # then feed key events into the queue the listener callbacks write to.
    monkeypatch.setattr(tk, "require_package", lambda *a, **k: None)
    monkeypatch.setattr(tk.KeyboardTeleop, "is_connected", property(lambda self: True))
    teleop = tk.KeyboardTeleop(tk.KeyboardTeleopConfig(calibration_dir=tmp_path / "t"))
    robot = make_robot(tiny_dir, tmp_path, key_step=10.0)
    robot.connect()
    start = robot.mapper.target.copy()

    def press(key: Any, down: bool = True) -> dict[str, float]:
        teleop.event_queue.put((key, down))
        return robot.send_action(teleop.get_action())

    right = press(Key.right)
    assert right["x"] == pytest.approx(min(start[0] + 10, 512)) and right["y"] == start[1]
    held = robot.send_action(teleop.get_action())  # still pressed: moves again
    assert held["x"] == pytest.approx(min(start[0] + 20, 512))
    press(Key.right, down=False)
    up = press("w")
    assert up["y"] == pytest.approx(max(start[1] - 10, 0))
    press("w", down=False)
    still = robot.send_action(teleop.get_action())
    assert still == robot.send_action(teleop.get_action())


def test_mapping_options_for_other_teleoperators() -> None:
    ee = TargetMapper(TargetMapping(key_step=5.0))
    ee.reset(np.array([100.0, 100.0]))
    moved = ee.update({"delta_x": 1.0, "delta_y": -1.0, "delta_z": 0.0, "gripper": 1.0})
    assert moved.tolist() == [95.0, 95.0]  # keyboard_ee / gamepad: "left" is +delta_x
    arm = TargetMapper(
        TargetMapping(
            mode="absolute",
            keys=("shoulder_pan.pos", "elbow_flex.pos"),
            scale=(2.0, 2.0),
            offset=(256.0, 256.0),
        )
    )
    assert arm.update({"shoulder_pan.pos": 10.0, "elbow_flex.pos": -20.0}).tolist() == [276, 216]
    delta = TargetMapper(TargetMapping(mode="delta", keys=("a", "b")))
    delta.reset(np.array([10.0, 10.0]))
    assert delta.update({"a": 3.0, "b": -20.0}).tolist() == [13.0, 0.0]
    with pytest.raises(KeyError, match="shoulder_pan"):
        arm.update({"x": 1.0})
    with pytest.raises(ValueError, match="unknown mapping"):
        TargetMapping(mode="joystick")


def test_lerobot_record_loop_writes_targets(tiny_dir: Path, tmp_path: Path) -> None:
    """lerobot-record's own loop and features, with a scripted teleoperator."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.processor import make_default_processors
    from lerobot.scripts.lerobot_record import record_loop
    from lerobot.utils.feature_utils import combine_feature_dicts, hw_to_dataset_features

    robot = make_robot(tiny_dir, tmp_path, image_height=32, image_width=32)
    features = combine_feature_dicts(
        hw_to_dataset_features(robot.action_features, "action", use_video=False),
        hw_to_dataset_features(robot.observation_features, "observation", use_video=False),
    )
    ds = LeRobotDataset.create(
        "local/rec",
        10,
        root=tmp_path / "ds",
        robot_type=robot.name,
        features=features,
        use_videos=False,
    )

    class Scripted:  # lerobot's loop only needs get_action on a Teleoperator instance
        def get_action(self) -> dict[str, Any]:
            return {Key.down: None}

    from lerobot.teleoperators.teleoperator import Teleoperator

    teleop = Scripted()
    Teleoperator.register(Scripted)
    robot.connect()
    t, r, o = make_default_processors()
    events = {"exit_early": False, "rerecord_episode": False, "stop_recording": False}
    record_loop(
        robot=robot,
        events=events,
        fps=10,
        teleop_action_processor=t,
        robot_action_processor=r,
        robot_observation_processor=o,
        teleop=teleop,
        dataset=ds,
        control_time_s=0.35,
        single_task="push the T",
    )
    ds.save_episode()
    ds.finalize()
    loaded = LeRobotDataset("local/rec", root=tmp_path / "ds", video_backend="pyav")
    n = loaded.num_frames
    assert n >= 2
    acts = np.stack([loaded[i]["action"].numpy() for i in range(n)])  # the targets sent
    dy = np.diff(acts[:, 1])
    assert np.all(np.isclose(dy, 8.0) | (acts[1:, 1] == 512.0)), acts  # "down": +8 px a step
    assert np.all(acts[:, 0] == acts[0, 0])
    assert loaded[0]["observation.images.image"].shape == (3, 32, 32)


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"model": "/nonexistent/m"}, "no model directory /nonexistent/m"),
        ({"device": "tpu"}, "unknown device 'tpu'"),
        ({"mapping": "joystick"}, "unknown mapping 'joystick'"),
    ],
)
def test_bad_input_is_one_line_before_connect(
    tiny_dir: Path, tmp_path: Path, kw: dict[str, str], needle: str
) -> None:
    cfg = DemofactoryRobotConfig(
        **{"model": str(tiny_dir), "device": "cpu", "calibration_dir": tmp_path, **kw}
    )
    with pytest.raises(PluginInputError) as err:
        make_robot_from_config(cfg)
    assert needle in str(err.value) and "\n" not in str(err.value) and err.value.code == 2
