"""The collectors: one module per job, each a plain function of explicit arguments (connections, cut-off
time, Params), testable without Airflow. They import the core only, and never each other."""
