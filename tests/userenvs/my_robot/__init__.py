"""A user's own envs, as a user would write them, outside rlrun: `my_robot.envs` registers them
with Gymnasium when it is imported (rlrun's tests name them as "my_robot.envs:Reach-v0")."""
