"""What TRL lacks: periodic evaluation, callbacks, (later) PPO and reward-hacking monitors."""
