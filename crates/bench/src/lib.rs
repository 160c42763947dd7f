//! Load generators and benchmark peers for anteroom.
