//! The crowd scenario file (TOML): who arrives when, how they behave, and the room they meet.
//!
//! The `[room]` table states what the room is configured with; the simulator checks the run
//! against it (rate, cap, order), and the bench scripts write the anteroom room from it, so
//! the two cannot drift apart. Visitor `i`'s arrival and choices come from a generator seeded
//! by `seed` and `i`, so every worker process draws the same plan for the same visitor.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A whole scenario file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Scenario {
    /// Names the run in the report.
    pub(crate) name: String,
    /// A sentence for the report.
    #[serde(default)]
    pub(crate) description: String,
    /// Visitors in the whole run.
    pub(crate) visitors: usize,
    /// Seeds every visitor's plan.
    #[serde(default)]
    pub(crate) seed: u64,
    /// The run stops after this long, whatever the visitors are doing.
    #[serde(
        default = "default_time_limit",
        deserialize_with = "duration",
        serialize_with = "show_duration"
    )]
    pub(crate) time_limit: Duration,
    /// Visitors one worker process simulates at most (each holds a few open files).
    #[serde(default = "default_visitors_per_worker")]
    pub(crate) visitors_per_worker: usize,
    pub(crate) arrival: Arrival,
    pub(crate) room: RoomSettings,
    #[serde(default)]
    pub(crate) behaviour: Behaviour,
    #[serde(default)]
    pub(crate) origin: OriginSettings,
    /// The figures the report's targets are judged against.
    #[serde(default)]
    pub(crate) targets: Targets,
}

fn default_time_limit() -> Duration {
    Duration::from_secs(300)
}

fn default_visitors_per_worker() -> usize {
    5_000
}

/// The arrival curve.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Arrival {
    pub(crate) shape: Shape,
    /// Spike: everyone arrives within this, uniformly. Ramp: the arrival rate grows linearly
    /// from zero over this. Steady: arrivals evenly spaced over this.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub(crate) over: Duration,
}

/// How arrivals are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Shape {
    Spike,
    Ramp,
    Steady,
}

/// What the room is configured with (SPEC §3); the checks compare the run with it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RoomSettings {
    pub(crate) id: String,
    /// 0 = unlimited.
    #[serde(default)]
    pub(crate) max_active: u64,
    /// 0 = unlimited.
    #[serde(default)]
    pub(crate) admit_per_minute: u64,
    /// Only for the room the scripts write; the simulator does not need it.
    #[serde(default)]
    pub(crate) admit_burst: Option<u64>,
    #[serde(default)]
    pub(crate) order: Order,
    /// For the room the scripts write (durations as anteroom reads them).
    #[serde(default)]
    pub(crate) session_ttl: Option<String>,
    #[serde(default)]
    pub(crate) claim_ttl: Option<String>,
    #[serde(default)]
    pub(crate) ticket_idle_ttl: Option<String>,
}

/// Admission order of the room.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Order {
    #[default]
    Fifo,
    Random,
}

/// How visitors behave.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Behaviour {
    /// Follow the line over SSE (as the waiting page does); poll when refused or off.
    pub(crate) sse: bool,
    /// With `sse`, only this many visitors follow over SSE, an even sample (every k-th
    /// visitor); the others poll by `next_poll_ms`. Each stream holds an open file in a
    /// worker and in a node: a crowd larger than the open-file limit polls. None: everybody.
    pub(crate) sse_visitors: Option<usize>,
    /// Share of visitors who give up while waiting.
    pub(crate) abandon_probability: f64,
    /// When such a visitor gives up, drawn uniformly in this range after joining.
    #[serde(deserialize_with = "duration_range", serialize_with = "show_range")]
    pub(crate) abandon_after: [Duration; 2],
    /// Share of those who say so (`DELETE` of the ticket); the others just go silent.
    pub(crate) leave_probability: f64,
    /// How long a visitor uses the site once in.
    pub(crate) session: SessionLength,
    /// Pause between two requests of one session, drawn uniformly in this range.
    #[serde(deserialize_with = "duration_range", serialize_with = "show_range")]
    pub(crate) think: [Duration; 2],
    /// Share of sessions that just stop (and expire) instead of ending with a release.
    pub(crate) expire_probability: f64,
    /// The protected path visitors request through the gateway.
    pub(crate) path: String,
}

impl Default for Behaviour {
    fn default() -> Behaviour {
        Behaviour {
            sse: true,
            sse_visitors: None,
            abandon_probability: 0.0,
            abandon_after: [Duration::from_secs(10), Duration::from_secs(60)],
            leave_probability: 0.5,
            session: SessionLength::Uniform {
                min: Duration::from_secs(2),
                max: Duration::from_secs(8),
            },
            think: [Duration::from_millis(500), Duration::from_millis(1500)],
            expire_probability: 0.0,
            path: "/shop/".to_owned(),
        }
    }
}

/// The distribution of session lengths.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "distribution", rename_all = "lowercase", deny_unknown_fields)]
pub(crate) enum SessionLength {
    Uniform {
        #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
        min: Duration,
        #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
        max: Duration,
    },
    /// Exponential with this mean, cut at `max`.
    Exponential {
        #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
        mean: Duration,
        #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
        max: Duration,
    },
}

/// The origin the simulator runs itself, behind the gateway.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct OriginSettings {
    pub(crate) enabled: bool,
    /// Where it listens (`--origin` overrides); the gateway's `[upstream] url` points here.
    pub(crate) listen: Option<SocketAddr>,
    /// How long each request takes to answer.
    #[serde(deserialize_with = "duration", serialize_with = "show_duration")]
    pub(crate) latency: Duration,
}

impl Default for OriginSettings {
    fn default() -> OriginSettings {
        OriginSettings {
            enabled: true,
            listen: None,
            latency: Duration::from_millis(20),
        }
    }
}

/// The figures the report judges its targets against (the invariants have none: they hold or
/// not), each a fraction.
#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct Targets {
    /// The largest deviation of the measured admission rate from `admit_per_minute`.
    pub(crate) admission_rate: f64,
    /// The largest median ETA error after the first minute, relative to the actual wait.
    pub(crate) eta_error: f64,
}

impl Default for Targets {
    fn default() -> Targets {
        Targets {
            admission_rate: 0.05,
            eta_error: 0.20,
        }
    }
}

/// One visitor's plan, the same in every process.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) id: usize,
    /// The target (node) this visitor talks to: round-robin.
    pub(crate) node: usize,
    pub(crate) arrival: Duration,
    /// Follows the line over SSE (else polls).
    pub(crate) follows_stream: bool,
    /// Gives up this long after joining, if still waiting.
    pub(crate) abandon_after: Option<Duration>,
    /// Says so when giving up.
    pub(crate) leaves: bool,
    pub(crate) session: Duration,
    pub(crate) expires: bool,
    /// Seeds the think times.
    pub(crate) seed: u64,
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the scenario {}", path.display()))?;
        let scenario: Scenario = toml::from_str(&text)
            .with_context(|| format!("the scenario {} is not valid", path.display()))?;
        scenario.check()?;
        Ok(scenario)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.visitors == 0 {
            bail!("visitors must be at least 1");
        }
        if self.visitors_per_worker == 0 {
            bail!("visitors_per_worker must be at least 1");
        }
        let behaviour = &self.behaviour;
        for (name, p) in [
            ("abandon_probability", behaviour.abandon_probability),
            ("leave_probability", behaviour.leave_probability),
            ("expire_probability", behaviour.expire_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                bail!("behaviour.{name} must be within 0 and 1, not {p}");
            }
        }
        for (name, fraction) in [
            ("admission_rate", self.targets.admission_rate),
            ("eta_error", self.targets.eta_error),
        ] {
            if !(fraction > 0.0 && fraction <= 1.0) {
                bail!("targets.{name} must be a fraction above 0 and at most 1, not {fraction}");
            }
        }
        if !behaviour.path.starts_with('/') {
            bail!("behaviour.path must start with '/'");
        }
        let ordered = |name: &str, [low, high]: [Duration; 2]| {
            if low > high {
                bail!("behaviour.{name}: the first bound is above the second");
            }
            Ok(())
        };
        ordered("abandon_after", behaviour.abandon_after)?;
        ordered("think", behaviour.think)?;
        match behaviour.session {
            SessionLength::Uniform { min, max } => ordered("session", [min, max])?,
            SessionLength::Exponential { mean, max } => {
                if mean.is_zero() || max.is_zero() {
                    bail!("behaviour.session: mean and max must be above zero");
                }
            }
        }
        if !self
            .room
            .id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            || self.room.id.is_empty()
        {
            bail!("room.id is not a room id: {:?}", self.room.id);
        }
        Ok(())
    }

    /// Whether visitor `id` follows the line over SSE: all of them, or every k-th for a sample
    /// of `sse_visitors`.
    fn follows_stream(&self, id: usize) -> bool {
        match self.behaviour.sse_visitors {
            _ if !self.behaviour.sse => false,
            None => true,
            Some(0) => false,
            Some(sample) => id.is_multiple_of(self.visitors.div_ceil(sample).max(1)),
        }
    }

    /// How many worker processes the visitors need.
    pub(crate) fn workers(&self) -> usize {
        self.visitors.div_ceil(self.visitors_per_worker)
    }

    /// Visitor `id`'s plan, spread over `nodes` targets.
    pub(crate) fn plan(&self, id: usize, nodes: usize) -> Plan {
        let mut rng =
            StdRng::seed_from_u64(self.seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let over = self.arrival.over.as_secs_f64();
        let arrival = match self.arrival.shape {
            Shape::Spike => over * rng.r#gen::<f64>(),
            Shape::Ramp => over * rng.r#gen::<f64>().sqrt(),
            Shape::Steady => over * id as f64 / self.visitors as f64,
        };
        let behaviour = &self.behaviour;
        let abandons = rng.r#gen::<f64>() < behaviour.abandon_probability;
        let abandon_after = uniform(&mut rng, behaviour.abandon_after);
        let leaves = rng.r#gen::<f64>() < behaviour.leave_probability;
        let session = match behaviour.session {
            SessionLength::Uniform { min, max } => uniform(&mut rng, [min, max]),
            SessionLength::Exponential { mean, max } => {
                let draw = -mean.as_secs_f64() * (1.0 - rng.r#gen::<f64>()).ln();
                Duration::from_secs_f64(draw).min(max)
            }
        };
        let expires = rng.r#gen::<f64>() < behaviour.expire_probability;
        Plan {
            id,
            node: id % nodes.max(1),
            arrival: Duration::from_secs_f64(arrival),
            follows_stream: self.follows_stream(id),
            abandon_after: abandons.then_some(abandon_after),
            leaves,
            session,
            expires,
            seed: rng.r#gen(),
        }
    }
}

/// A duration drawn uniformly in `[low, high]`.
pub(crate) fn uniform(rng: &mut impl Rng, [low, high]: [Duration; 2]) -> Duration {
    if high <= low {
        return low;
    }
    low + (high - low).mul_f64(rng.r#gen::<f64>())
}

/// Reads `500ms`, `30s`, `2m`, `1h` or combinations (`1m30s`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("an empty duration".to_owned());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("not a duration: {text:?}"))?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let step = match &rest[..unit] {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number * 60),
            "h" => Duration::from_secs(number * 3600),
            _ => return Err(format!("not a duration: {text:?} (use ms, s, m or h)")),
        };
        total += step;
        rest = &rest[unit..];
    }
    Ok(total)
}

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

fn show_duration<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format!("{}ms", value.as_millis()))
}

fn show_range<S: Serializer>(value: &[Duration; 2], serializer: S) -> Result<S::Ok, S::Error> {
    [
        format!("{}ms", value[0].as_millis()),
        format!("{}ms", value[1].as_millis()),
    ]
    .serialize(serializer)
}

fn duration_range<'de, D: Deserializer<'de>>(deserializer: D) -> Result<[Duration; 2], D::Error> {
    let [low, high] = <[String; 2]>::deserialize(deserializer)?;
    Ok([
        parse_duration(&low).map_err(serde::de::Error::custom)?,
        parse_duration(&high).map_err(serde::de::Error::custom)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_anteroom_config() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("5 s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn plans_are_the_same_for_the_same_visitor_and_spread_over_nodes() {
        let scenario: Scenario = toml::from_str(
            "name = \"t\"\nvisitors = 10\nseed = 7\n[arrival]\nshape = \"ramp\"\nover = \"10s\"\n\
             [room]\nid = \"r\"\n[behaviour]\nabandon_probability = 0.5\n",
        )
        .expect("valid scenario");
        let first = scenario.plan(3, 3);
        let again = scenario.plan(3, 3);
        assert_eq!(first.arrival, again.arrival);
        assert_eq!(first.session, again.session);
        assert_eq!(first.node, 0);
        assert_eq!(scenario.plan(4, 3).node, 1);
        assert!(first.arrival <= Duration::from_secs(10));
    }

    #[test]
    fn a_sample_of_visitors_follows_over_sse_spread_over_the_nodes() {
        let scenario: Scenario = toml::from_str(
            "name = \"t\"\nvisitors = 200\n[arrival]\nshape = \"spike\"\nover = \"10s\"\n\
             [room]\nid = \"r\"\n[behaviour]\nsse_visitors = 10\n",
        )
        .expect("valid scenario");
        let following: Vec<Plan> = (0..200)
            .map(|id| scenario.plan(id, 3))
            .filter(|plan| plan.follows_stream)
            .collect();
        assert_eq!(following.len(), 10);
        for node in 0..3 {
            assert!(
                following.iter().any(|plan| plan.node == node),
                "node {node}"
            );
        }
        let polling_only: Scenario = toml::from_str(
            "name = \"t\"\nvisitors = 5\n[arrival]\nshape = \"spike\"\nover = \"1s\"\n\
             [room]\nid = \"r\"\n[behaviour]\nsse = false\nsse_visitors = 5\n",
        )
        .expect("valid scenario");
        assert!((0..5).all(|id| !polling_only.plan(id, 1).follows_stream));
    }

    #[test]
    fn targets_are_fractions_the_scenario_may_tighten() {
        let base = "name = \"t\"\nvisitors = 5\n[arrival]\nshape = \"spike\"\nover = \"1s\"\n\
                    [room]\nid = \"r\"\n";
        let plain: Scenario = toml::from_str(base).expect("valid scenario");
        assert_eq!(plain.targets.admission_rate, 0.05);
        assert_eq!(plain.targets.eta_error, 0.20);
        let tight: Scenario =
            toml::from_str(&format!("{base}[targets]\neta_error = 0.1\n")).expect("valid");
        assert_eq!(tight.targets.eta_error, 0.1);
        assert_eq!(tight.targets.admission_rate, 0.05);
        tight.check().expect("a fraction is a target");
        for bad in [
            "eta_error = 0.0",
            "eta_error = 1.5",
            "admission_rate = -0.05",
        ] {
            let scenario: Scenario =
                toml::from_str(&format!("{base}[targets]\n{bad}\n")).expect("parses");
            let refused = scenario.check().expect_err(bad).to_string();
            assert!(refused.starts_with("targets."), "{refused}");
        }
        assert!(toml::from_str::<Scenario>(&format!("{base}[targets]\neta = 0.1\n")).is_err());
    }
}
