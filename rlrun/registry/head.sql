-- The head schema on SQLite: what an empty registry (in memory, where there is no registry file
-- yet) is made of. Generated from rlrun/registry/tables.py, never edited by hand:
--   python -c 'from rlrun.registry.tables import sqlite_script; print(sqlite_script(), end="")' \
--       > rlrun/registry/head.sql

CREATE TABLE runs (
	id VARCHAR(32) NOT NULL,
	name VARCHAR(200),
	spec_name VARCHAR(200) NOT NULL,
	algorithm VARCHAR(64) NOT NULL,
	env_id VARCHAR(200) NOT NULL,
	status VARCHAR(16) NOT NULL,
	max_frame BIGINT NOT NULL,
	num_sessions INTEGER NOT NULL,
	seed BIGINT NOT NULL,
	parent_id VARCHAR(32),
	host VARCHAR(255),
	pid INTEGER,
	error TEXT,
	created_at FLOAT NOT NULL,
	finished_at FLOAT,
	supervisor VARCHAR(255),
	stop_requested_at FLOAT,
	home TEXT,
	slurm_jobs TEXT,
	origin VARCHAR(32),
	CONSTRAINT pk_runs PRIMARY KEY (id),
	CONSTRAINT uq_runs_name UNIQUE (name),
	CONSTRAINT fk_runs_parent_id_runs FOREIGN KEY(parent_id) REFERENCES runs (id) ON DELETE SET NULL
);

CREATE INDEX ix_runs_created_at ON runs (created_at, id);

CREATE INDEX ix_runs_parent_id ON runs (parent_id);

CREATE TABLE searches (
	id VARCHAR(32) NOT NULL,
	name VARCHAR(200),
	spec_name VARCHAR(200) NOT NULL,
	spec_json TEXT NOT NULL,
	space_json TEXT NOT NULL,
	settings_json TEXT NOT NULL,
	status VARCHAR(16) NOT NULL,
	host VARCHAR(255),
	pid INTEGER,
	error TEXT,
	importance_json TEXT,
	created_at FLOAT NOT NULL,
	finished_at FLOAT,
	heartbeat_at FLOAT,
	stop_requested_at FLOAT,
	driver VARCHAR(255),
	CONSTRAINT pk_searches PRIMARY KEY (id),
	CONSTRAINT uq_searches_name UNIQUE (name)
);

CREATE INDEX ix_searches_created_at ON searches (created_at, id);

CREATE TABLE sessions (
	id INTEGER NOT NULL,
	run_id VARCHAR(32) NOT NULL,
	session_index INTEGER NOT NULL,
	seed BIGINT NOT NULL,
	status VARCHAR(16) NOT NULL,
	frame BIGINT NOT NULL,
	episode BIGINT NOT NULL,
	opt_step BIGINT NOT NULL,
	best_eval FLOAT,
	last_eval FLOAT,
	host VARCHAR(255),
	pid INTEGER,
	heartbeat_at FLOAT,
	started_at FLOAT,
	finished_at FLOAT,
	error TEXT,
	lease BIGINT DEFAULT 0 NOT NULL,
	CONSTRAINT pk_sessions PRIMARY KEY (id),
	CONSTRAINT uq_sessions_run_id_session_index UNIQUE (run_id, session_index),
	CONSTRAINT fk_sessions_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE CASCADE
);

CREATE TABLE spec_revisions (
	id INTEGER NOT NULL,
	run_id VARCHAR(32) NOT NULL,
	revision INTEGER NOT NULL,
	frame BIGINT NOT NULL,
	spec_json TEXT NOT NULL,
	diff_json TEXT,
	created_at FLOAT NOT NULL,
	CONSTRAINT pk_spec_revisions PRIMARY KEY (id),
	CONSTRAINT uq_spec_revisions_run_id_revision UNIQUE (run_id, revision),
	CONSTRAINT fk_spec_revisions_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE CASCADE
);

CREATE TABLE trials (
	id INTEGER NOT NULL,
	search_id VARCHAR(32) NOT NULL,
	number INTEGER NOT NULL,
	run_id VARCHAR(32),
	params_json TEXT NOT NULL,
	state VARCHAR(16) NOT NULL,
	value FLOAT,
	intermediate_json TEXT NOT NULL,
	system_attrs_json TEXT NOT NULL,
	note TEXT,
	created_at FLOAT NOT NULL,
	finished_at FLOAT,
	CONSTRAINT pk_trials PRIMARY KEY (id),
	CONSTRAINT uq_trials_search_id_number UNIQUE (search_id, number),
	CONSTRAINT fk_trials_search_id_searches FOREIGN KEY(search_id) REFERENCES searches (id) ON DELETE CASCADE,
	CONSTRAINT fk_trials_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE SET NULL
);

CREATE INDEX ix_trials_run_id ON trials (run_id);

CREATE TABLE attempts (
	id INTEGER NOT NULL,
	run_id VARCHAR(32) NOT NULL,
	session_id INTEGER NOT NULL,
	kind VARCHAR(16) NOT NULL,
	host VARCHAR(255),
	pid INTEGER,
	start_frame BIGINT NOT NULL,
	started_at FLOAT NOT NULL,
	ended_at FLOAT,
	end_status VARCHAR(16),
	approximate BOOLEAN DEFAULT 0 NOT NULL,
	note TEXT,
	node VARCHAR(64),
	lease BIGINT,
	CONSTRAINT pk_attempts PRIMARY KEY (id),
	CONSTRAINT fk_attempts_run_id_runs FOREIGN KEY(run_id) REFERENCES runs (id) ON DELETE CASCADE,
	CONSTRAINT fk_attempts_session_id_sessions FOREIGN KEY(session_id) REFERENCES sessions (id) ON DELETE CASCADE
);

CREATE INDEX ix_attempts_run_id ON attempts (run_id);

CREATE INDEX ix_attempts_session_id ON attempts (session_id);

CREATE TABLE checkpoints (
	id INTEGER NOT NULL,
	session_id INTEGER NOT NULL,
	frame BIGINT NOT NULL,
	kind VARCHAR(64) NOT NULL,
	path TEXT NOT NULL,
	sha256 VARCHAR(64) NOT NULL,
	size_bytes BIGINT NOT NULL,
	created_at FLOAT NOT NULL,
	CONSTRAINT pk_checkpoints PRIMARY KEY (id),
	CONSTRAINT fk_checkpoints_session_id_sessions FOREIGN KEY(session_id) REFERENCES sessions (id) ON DELETE CASCADE
);

CREATE INDEX ix_checkpoints_session_id ON checkpoints (session_id);

CREATE TABLE evaluations (
	id INTEGER NOT NULL,
	session_id INTEGER NOT NULL,
	frame BIGINT NOT NULL,
	kind VARCHAR(16) DEFAULT 'train' NOT NULL,
	mean FLOAT NOT NULL,
	std FLOAT NOT NULL,
	min FLOAT NOT NULL,
	max FLOAT NOT NULL,
	episodes INTEGER NOT NULL,
	created_at FLOAT NOT NULL,
	CONSTRAINT pk_evaluations PRIMARY KEY (id),
	CONSTRAINT fk_evaluations_session_id_sessions FOREIGN KEY(session_id) REFERENCES sessions (id) ON DELETE CASCADE
);

CREATE INDEX ix_evaluations_session_id ON evaluations (session_id);

CREATE TABLE lineage (
	trial_id INTEGER NOT NULL,
	search_id VARCHAR(32) NOT NULL,
	member INTEGER NOT NULL,
	generation INTEGER NOT NULL,
	parent_member INTEGER,
	parent_run_id VARCHAR(32),
	frame BIGINT NOT NULL,
	mutated_json TEXT NOT NULL,
	CONSTRAINT pk_lineage PRIMARY KEY (trial_id),
	CONSTRAINT fk_lineage_trial_id_trials FOREIGN KEY(trial_id) REFERENCES trials (id) ON DELETE CASCADE,
	CONSTRAINT fk_lineage_search_id_searches FOREIGN KEY(search_id) REFERENCES searches (id) ON DELETE CASCADE
);

CREATE INDEX ix_lineage_search_id ON lineage (search_id, generation, member);
