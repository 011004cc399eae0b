"""What every recipe measures: held-out CRN samples, KL, learning probe, periodic evaluation, monitors, metric logs."""
