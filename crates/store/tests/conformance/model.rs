//! A deliberately naive reference model of one FIFO `queue` room: a plain list of tickets,
//! linear scans, no indexes. The property test holds every backend to its answers. Tickets
//! that joined with a priority code are served first, each lane counting its own `ahead`.

#![allow(dead_code)]

/// The limits the model runs with.
#[derive(Debug, Clone, Copy)]
pub struct ModelLimits {
    pub max_active: u64,
    pub admit_per_minute: u64,
    pub admit_burst: u64,
    pub claim_ttl_ms: u64,
    pub session_ttl_ms: u64,
    pub idle_ttl_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelState {
    Waiting { last_seen: u64 },
    Admitted { deadline: u64 },
    Claimed { expires_at: u64, ended: bool },
    Gone,
}

/// What the model expects a status call to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelStatus {
    Waiting { ahead: u64 },
    Admitted,
    Gone,
}

#[derive(Debug, Clone)]
pub struct ModelRoom {
    pub limits: ModelLimits,
    /// Tickets in join order: index i has position i + 1.
    pub tickets: Vec<ModelState>,
    /// Whether ticket i joined with a priority code.
    pub priority: Vec<bool>,
    pub serving: u64,
    bucket_units: u64,
    bucket_at: u64,
}

const UNITS: u64 = 60_000;

impl ModelRoom {
    pub fn new(limits: ModelLimits, now: u64) -> ModelRoom {
        ModelRoom {
            limits,
            tickets: Vec::new(),
            priority: Vec::new(),
            serving: 0,
            bucket_units: limits.admit_burst * UNITS,
            bucket_at: now,
        }
    }

    fn refill(&mut self, now: u64) {
        let earned = now.saturating_sub(self.bucket_at) * self.limits.admit_per_minute;
        self.bucket_units = (self.bucket_units + earned).min(self.limits.admit_burst * UNITS);
        self.bucket_at = self.bucket_at.max(now);
    }

    fn tokens(&self) -> u64 {
        if self.limits.admit_per_minute == 0 {
            u64::MAX
        } else {
            self.bucket_units / UNITS
        }
    }

    fn spend(&mut self, n: u64) {
        if self.limits.admit_per_minute != 0 {
            self.bucket_units -= n * UNITS;
        }
    }

    pub fn waiting(&self) -> u64 {
        self.tickets
            .iter()
            .filter(|t| matches!(t, ModelState::Waiting { .. }))
            .count() as u64
    }

    pub fn active(&self) -> u64 {
        self.tickets
            .iter()
            .filter(|t| matches!(t, ModelState::Claimed { ended: false, .. }))
            .count() as u64
    }

    pub fn admitted_unclaimed(&self) -> u64 {
        self.tickets
            .iter()
            .filter(|t| matches!(t, ModelState::Admitted { .. }))
            .count() as u64
    }

    fn free(&self) -> u64 {
        if self.limits.max_active == 0 {
            return u64::MAX;
        }
        self.limits
            .max_active
            .saturating_sub(self.active() + self.admitted_unclaimed())
    }

    /// Joins; returns the new position and whether it entered at once.
    pub fn join(&mut self, now: u64, priority: bool) -> (u64, bool) {
        self.tickets.push(ModelState::Waiting { last_seen: now });
        self.priority.push(priority);
        let index = self.tickets.len() - 1;
        self.refill(now);
        let at_once = self.waiting() == 1 && self.free() >= 1 && self.tokens() >= 1;
        if at_once {
            self.spend(1);
            self.serving = self.serving.max(index as u64 + 1);
            self.tickets[index] = ModelState::Claimed {
                expires_at: now + self.limits.session_ttl_ms,
                ended: false,
            };
        }
        (index as u64 + 1, at_once)
    }

    pub fn status(&mut self, index: usize, now: u64) -> ModelStatus {
        match self.tickets[index] {
            ModelState::Waiting { last_seen } => {
                self.tickets[index] = ModelState::Waiting {
                    last_seen: last_seen.max(now),
                };
                let lane = self.priority[index];
                let ahead = self.tickets[..index]
                    .iter()
                    .zip(&self.priority)
                    .filter(|(t, p)| matches!(t, ModelState::Waiting { .. }) && **p == lane)
                    .count();
                ModelStatus::Waiting {
                    ahead: ahead as u64,
                }
            }
            ModelState::Admitted { .. } => {
                self.tickets[index] = ModelState::Claimed {
                    expires_at: now + self.limits.session_ttl_ms,
                    ended: false,
                };
                ModelStatus::Admitted
            }
            ModelState::Claimed { expires_at, ended } => {
                if ended {
                    ModelStatus::Gone
                } else if expires_at <= now {
                    self.tickets[index] = ModelState::Claimed {
                        expires_at,
                        ended: true,
                    };
                    ModelStatus::Gone
                } else {
                    ModelStatus::Admitted
                }
            }
            ModelState::Gone => ModelStatus::Gone,
        }
    }

    pub fn leave(&mut self, index: usize, now: u64) {
        match self.tickets[index] {
            ModelState::Waiting { .. } => self.tickets[index] = ModelState::Gone,
            ModelState::Admitted { .. } => {
                self.tickets[index] = ModelState::Gone;
                self.tick(now);
            }
            ModelState::Claimed {
                expires_at,
                ended: false,
            } => {
                self.tickets[index] = ModelState::Claimed {
                    expires_at,
                    ended: true,
                };
                self.tick(now);
            }
            ModelState::Claimed { ended: true, .. } | ModelState::Gone => {}
        }
    }

    /// Completes the session of a claimed ticket; `false` if it has none.
    pub fn complete(&mut self, index: usize, now: u64) -> bool {
        let ModelState::Claimed { expires_at, .. } = self.tickets[index] else {
            return false;
        };
        self.tickets[index] = ModelState::Claimed {
            expires_at,
            ended: true,
        };
        self.tick(now);
        true
    }

    /// Returns how many were admitted.
    pub fn tick(&mut self, now: u64) -> u64 {
        for ticket in &mut self.tickets {
            *ticket = match *ticket {
                ModelState::Claimed {
                    expires_at,
                    ended: false,
                } if expires_at <= now => ModelState::Claimed {
                    expires_at,
                    ended: true,
                },
                ModelState::Admitted { deadline } if deadline <= now => ModelState::Gone,
                ModelState::Waiting { last_seen } if last_seen + self.limits.idle_ttl_ms <= now => {
                    ModelState::Gone
                }
                other => other,
            };
        }
        self.refill(now);
        let n = self.waiting().min(self.free()).min(self.tokens());
        self.spend(n);
        let mut admitted = 0;
        for lane in [true, false] {
            for (index, ticket) in self.tickets.iter_mut().enumerate() {
                if admitted == n {
                    break;
                }
                if matches!(ticket, ModelState::Waiting { .. }) && self.priority[index] == lane {
                    *ticket = ModelState::Admitted {
                        deadline: now + self.limits.claim_ttl_ms,
                    };
                    self.serving = self.serving.max(index as u64 + 1);
                    admitted += 1;
                }
            }
        }
        admitted
    }

    /// A restart: waiting tickets count as seen at the restart.
    pub fn reopen(&mut self, now: u64) {
        for ticket in &mut self.tickets {
            if let ModelState::Waiting { last_seen } = ticket {
                *last_seen = (*last_seen).max(now);
            }
        }
    }
}
