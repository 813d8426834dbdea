"""The fit of the tracked bodies to the markers the assignment gave them (numpy, and the
compiled kernels of :mod:`.kernels` for the fit and the neighbour search).

Once per frame, for all tracked bodies at once (:meth:`TrackedFit.fit`): a weighted Kabsch
fit over each body's assigned markers, reached by Newton steps from its last good pose
(:func:`~mocap4r2_tools.tracking.kabsch.fit_near`; with fewer than 3 markers, the prior
orientation and a translation); then refinement: a marker far off the fit (a ghost that
won the assignment) is dropped, and free markers the fitted pose explains join; then the
fit is accepted only if it has enough markers, its RMS residual is within
``max_residual`` and the motion since the last good pose is within the dynamics. Accepted
fits update the bodies' motion state; the markers of a refused fit are left free for the
re-acquisition.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from mocap4r2_tools.tracking.bodies import TrackerConfig
from mocap4r2_tools.tracking.kabsch import fit_near
from mocap4r2_tools.tracking.kernels import MarkerIndex, commit, judge, motion
from mocap4r2_tools.tracking.single_hold import SingleMarkerHold
from mocap4r2_tools.tracking.track_state import BodyStates, Counters

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

NEIGHBOURS = 4  # observed markers considered per predicted or fitted marker


class TrackedFit:
    """Fit, refine, check and accept the tracked bodies of one configuration."""

    def __init__(
        self,
        config: TrackerConfig,
        *,
        local: FloatArray,
        slot: BoolArray,
        radius: FloatArray,
        single: BoolArray,
        state: BodyStates,
        counters: Counters,
        hold: SingleMarkerHold | None,
    ) -> None:
        """``local``/``slot``: the padded layouts and which of their markers exist;
        ``radius``: each layout's farthest marker from its origin; ``single``: the
        single-marker bodies; ``hold``: their hold, None when there are none."""
        self.config = config
        self.local = local
        self.slot = slot
        self.radius = radius
        self.single = single
        self.state = state
        self.counters = counters
        self.hold = hold
        self.need = np.where(self.single, 1, 2)  # markers a fit needs to be accepted
        # the angle a fit may turn beyond the dynamics: marker noise seen at the layout's radius
        self.noise_angle = 2.0 * config.limits.marker_gate / np.maximum(self.radius, 1e-3)

    def fit(
        self,
        obs: FloatArray,
        index: MarkerIndex,
        *,
        assigned: IntArray,
        tracked: BoolArray,
        coasted: BoolArray,
        pred_p: FloatArray,
        dt: FloatArray,
        gate: FloatArray,
        allowed: FloatArray,
        claimed: BoolArray,
        stamp: float,
        frame_dt: float,
    ) -> FloatArray:
        """Fit, refine and check the tracked bodies (``coasted``: not seen in the previous
        frame; ``allowed``: how far from the prediction a fit may be); returns their RMS
        residuals. Refused fits are cleared from ``assigned``; the markers of accepted ones
        are set in ``claimed``."""
        lim, dyn, state = self.config.limits, self.config.dynamics, self.state
        seen = assigned >= 0
        observed = obs[np.maximum(assigned, 0)]
        fit = fit_near(seen.astype(np.float64), self.local, observed, state.rotation, state.quat)
        rot, trans, rms, count, fitted, sq, quat, full = fit
        changed: BoolArray | None = None
        # refinement 1: markers far off the fit (a ghost that won the assignment) are dropped
        far = sq > (2.0 * lim.max_residual) ** 2
        if far.any():
            worst = np.argmax(sq, axis=1)
            drop = far[np.arange(len(worst)), worst] & (count > 3)
            assigned[np.flatnonzero(drop), worst[drop]] = -1
            changed = drop
        # how far the fit moved and turned from the prediction (also the checks below)
        step_sq, angle = motion(state.quat, quat, trans, pred_p)
        # refinement 2: free markers the fitted pose explains join the fit (the nearest
        # marker not taken among the neighbours of the fitted position)
        missing = ~seen & self.slot & (tracked & (count >= 3))[:, None]
        if missing.any():
            # a free marker within 2 max_residual of a fitted marker whose gate (around the
            # prediction) held that whole ball was offered to the assignment already, which
            # pairs every free marker inside a gate left empty: only the others are looked
            # up. A fitted marker is at most step + angle * radius from its prediction.
            drift = np.sqrt(step_sq) + angle * self.radius + 2.0 * lim.max_residual
            missing &= (drift > gate)[:, None]
            if missing.any():
                body, slot = np.nonzero(missing)
                changed = self._take_explained(
                    obs, index, assigned=assigned, fitted=fitted, body=body, slot=slot, changed=changed
                )
        if changed is not None and changed.any():
            c = np.flatnonzero(changed)
            weights_c = (assigned[c] >= 0).astype(np.float64)
            observed_c = obs[np.maximum(assigned[c], 0)]
            refit = fit_near(weights_c, self.local[c], observed_c, state.rotation[c], state.quat[c])
            rot[c], trans[c], rms[c], count[c], fitted[c], _, quat[c], full[c] = refit
            step_sq, angle = motion(state.quat, quat, trans, pred_p)
        # checks: enough markers, residual, and the motion since the last good pose
        good, refused = judge(
            tracked,
            count,
            self.need,
            rms,
            step_sq,
            angle,
            allowed,
            dt,
            self.single,
            self.noise_angle,
            float(lim.max_residual),
            float(dyn.max_angular_velocity),
        )
        self.counters.rejected_fits += refused
        if self.hold is not None:
            self.hold.confirm(
                good, coasted=coasted, trans=trans, step=np.sqrt(step_sq), stamp=stamp, frame_dt=frame_dt
            )
        # the good fits become the bodies' state, the others' markers are left free
        commit(
            good,
            assigned,
            claimed,
            trans,
            rot,
            quat,
            fitted,
            dt,
            float(stamp),
            state.position,
            state.velocity,
            state.velocity_known,
            state.rotation,
            state.quat,
            state.offsets,
            state.last_good,
        )
        return rms

    def _take_explained(
        self,
        obs: FloatArray,
        index: MarkerIndex,
        *,
        assigned: IntArray,
        fitted: FloatArray,
        body: IntArray,
        slot: IntArray,
        changed: BoolArray | None,
    ) -> BoolArray:
        """Layout markers (body, slot) not seen take the nearest free marker within
        2 max_residual of where the fit puts them; returns the bodies changed."""
        out = np.zeros(len(assigned), dtype=bool) if changed is None else changed
        taken = np.zeros(len(obs) + 1, dtype=bool)  # + the index's "no neighbour" index
        taken[assigned[assigned >= 0]] = True
        taken[-1] = True
        k = min(NEIGHBOURS, len(obs))
        reach = np.full(len(body), 2.0 * self.config.limits.max_residual)
        _, j = index.query(fitted[body, slot], reach, k)
        free = ~taken[j]
        has = free.any(axis=1)
        if has.any():
            cand = j[np.arange(len(j)), np.argmax(free, axis=1)][has]
            _, first = np.unique(cand, return_index=True)
            b, s = body[has][first], slot[has][first]
            assigned[b, s] = cand[first]
            out[b] = True
        return out
