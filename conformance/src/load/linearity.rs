//! Whether a scaling curve grows at most linearly (R-CNF-18): each step's growth in the value
//! against its growth in the input, with slack for noise. A curve with a fixed cost (`a + b·n`)
//! passes, since its value grows less than its input.

/// Relative slack a step may grow past its input's ratio (measurements are noisy).
pub const SLACK: f64 = 0.25;

/// The first step `i` (from point `i` to `i + 1`) whose value grew more than its input, past
/// `slack`; `None` when every step grew at most linearly. A value below `floor` counts as
/// `floor` at the start of a step (a reading near its resolution says little about a ratio).
/// Points are `(input, value)` with inputs rising; a step with a non-positive input is skipped.
pub fn faster_step(points: &[(f64, f64)], slack: f64, floor: f64) -> Option<usize> {
    points.windows(2).position(|w| {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        x0 > 0.0 && x1 > x0 && y1 > y0.max(floor) * (x1 / x0) * (1.0 + slack)
    })
}

/// The verdict line of a curve: `<what>: grows at most linearly`, or `<what>: grows faster
/// than linearly: <from> to <to> (<value ratio>x for <input ratio>x)`. `labels` names the
/// points, as the section does.
pub fn verdict(what: &str, points: &[(f64, f64)], labels: &[String], floor: f64) -> String {
    match faster_step(points, SLACK, floor) {
        None => format!("{what}: grows at most linearly\n"),
        Some(i) => {
            let ((x0, y0), (x1, y1)) = (points[i], points[i + 1]);
            format!(
                "{what}: grows faster than linearly: {} to {} ({:.1}x for {:.1}x)\n",
                labels[i],
                labels[i + 1],
                y1 / y0.max(floor),
                x1 / x0
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_and_fixed_cost_curves_pass_and_a_quadratic_step_is_named() {
        let linear = [(1.0, 2.0), (100.0, 200.0), (1000.0, 2000.0)];
        assert_eq!(faster_step(&linear, SLACK, 0.0), None);
        let fixed_cost = [(1.0, 6.0), (100.0, 12.1), (1000.0, 90.0)];
        assert_eq!(faster_step(&fixed_cost, SLACK, 0.0), None);
        // The tool count's debug run on a busy machine: 31x for 10x at the second step.
        let measured = [(1.0, 6.0), (100.0, 12.1), (1000.0, 377.0)];
        assert_eq!(faster_step(&measured, SLACK, 0.0), Some(1));
        let quadratic = [(1.0, 1.0), (10.0, 100.0), (100.0, 10_000.0)];
        assert_eq!(faster_step(&quadratic, SLACK, 0.0), Some(0));
    }

    #[test]
    fn slack_absorbs_noise_and_a_floor_absorbs_readings_near_resolution() {
        assert_eq!(faster_step(&[(1.0, 10.0), (10.0, 120.0)], SLACK, 0.0), None);
        assert_eq!(
            faster_step(&[(1.0, 10.0), (10.0, 130.0)], SLACK, 0.0),
            Some(0)
        );
        // 0 ms of CPU, then 8 ms for 100 times the input: the zero says nothing.
        assert_eq!(faster_step(&[(1.0, 0.0), (100.0, 8.0)], SLACK, 1.0), None);
        assert_eq!(
            faster_step(&[(1.0, 0.0), (100.0, 8.0)], SLACK, 0.0),
            Some(0)
        );
        assert_eq!(faster_step(&[(5.0, 1.0)], SLACK, 0.0), None, "one point");
        assert_eq!(faster_step(&[], SLACK, 0.0), None);
    }

    #[test]
    fn the_verdict_names_the_step_and_its_ratios() {
        let labels = ["1 tools", "100 tools", "1000 tools"].map(String::from);
        let measured = [(1.0, 6.0), (100.0, 12.1), (1000.0, 377.0)];
        assert_eq!(
            verdict("later listing p50", &measured, &labels, 1.0),
            "later listing p50: grows faster than linearly: 100 tools to 1000 tools (31.2x for 10.0x)\n"
        );
        let linear = [(1.0, 2.0), (100.0, 8.0), (1000.0, 74.0)];
        assert_eq!(
            verdict("connector CPU per listing", &linear, &labels, 1.0),
            "connector CPU per listing: grows at most linearly\n"
        );
    }
}
