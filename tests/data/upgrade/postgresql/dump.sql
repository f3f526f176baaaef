--
-- PostgreSQL database dump
--

\restrict XIhXbftIbDo4WlyALdsKp5Xri4eBV1Yii0wJw6c4AfU6XemkOXhd7uHY3Ms8I6u

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: elements; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.elements (
    id text NOT NULL,
    "threadId" text,
    type text,
    url text,
    "chainlitKey" text,
    name text NOT NULL,
    display text,
    "objectKey" text,
    size text,
    page integer,
    language text,
    "forId" text,
    mime text,
    props text,
    "autoPlay" boolean,
    "playerConfig" text
);


--
-- Name: feedbacks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.feedbacks (
    id text NOT NULL,
    "forId" text NOT NULL,
    "threadId" text NOT NULL,
    value integer NOT NULL,
    comment text
);


--
-- Name: kimi_images; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.kimi_images (
    thread_id text NOT NULL,
    turn integer NOT NULL,
    "position" integer NOT NULL,
    name text NOT NULL,
    object_key text NOT NULL,
    width integer NOT NULL,
    height integer NOT NULL,
    tokens integer NOT NULL,
    source_bytes integer NOT NULL
);


--
-- Name: kimi_schema; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.kimi_schema (
    version integer NOT NULL,
    applied_at text NOT NULL
);


--
-- Name: kimi_turns; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.kimi_turns (
    thread_id text NOT NULL,
    "position" integer NOT NULL,
    message_id text NOT NULL,
    answer_id text,
    text text NOT NULL,
    answer text NOT NULL,
    reasoning text NOT NULL,
    reasoning_s real,
    stats text,
    status text NOT NULL,
    model text,
    options text,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    ttft_s double precision,
    elapsed_s double precision,
    completion_tokens integer
);


--
-- Name: kimi_users; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.kimi_users (
    name text NOT NULL,
    password_hash text NOT NULL,
    created_at text NOT NULL,
    token_generation integer DEFAULT 0 NOT NULL
);


--
-- Name: steps; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.steps (
    id text NOT NULL,
    name text NOT NULL,
    type text NOT NULL,
    "threadId" text NOT NULL,
    "parentId" text,
    streaming boolean NOT NULL,
    "waitForAnswer" boolean,
    "isError" boolean,
    metadata text,
    tags text,
    input text,
    output text,
    "createdAt" text,
    start text,
    "end" text,
    generation text,
    "showInput" text,
    language text,
    indent integer,
    command text,
    "defaultOpen" boolean,
    "autoCollapse" boolean,
    modes text
);


--
-- Name: threads; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.threads (
    id text NOT NULL,
    "createdAt" text,
    name text,
    "userId" text,
    "userIdentifier" text,
    tags text,
    metadata text
);


--
-- Name: users; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.users (
    id text NOT NULL,
    identifier text NOT NULL,
    metadata text NOT NULL,
    "createdAt" text
);


--
-- Data for Name: elements; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.elements (id, "threadId", type, url, "chainlitKey", name, display, "objectKey", size, page, language, "forId", mime, props, "autoPlay", "playerConfig") FROM stdin;
86a49523-84d5-4d81-93a9-0c228b8bdc6c	ce543467-ce5c-4738-bd6f-0ae1f888eadb	image	/kimi/files/55aebc16-3f84-4a93-b52d-bf713a7c3751/86a49523-84d5-4d81-93a9-0c228b8bdc6c/rocket-small.jpg	86a49523-84d5-4d81-93a9-0c228b8bdc6c	rocket-small.jpg	inline	55aebc16-3f84-4a93-b52d-bf713a7c3751/86a49523-84d5-4d81-93a9-0c228b8bdc6c/rocket-small.jpg	medium	\N	\N	f0e1cf86-9a11-46a2-8066-ffb75dcacff8	image/jpeg	\N	\N	\N
\.


--
-- Data for Name: feedbacks; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.feedbacks (id, "forId", "threadId", value, comment) FROM stdin;
bb5a01cf-5f30-431d-8f36-bc09d69b87f6	48242578-76f8-419c-b2d1-129032319fc0	ce543467-ce5c-4738-bd6f-0ae1f888eadb	1	Right about the rocket
\.


--
-- Data for Name: kimi_images; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.kimi_images (thread_id, turn, "position", name, object_key, width, height, tokens, source_bytes) FROM stdin;
ce543467-ce5c-4738-bd6f-0ae1f888eadb	0	0	rocket-small.jpg	prepared/ce543467-ce5c-4738-bd6f-0ae1f888eadb/02824addcd1a09d65b531d4d98e58c726f50efb6.jpg	96	64	12	1338
\.


--
-- Data for Name: kimi_schema; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.kimi_schema (version, applied_at) FROM stdin;
1	2026-12-06T04:15:38.683954+00:00
2	2026-12-06T04:15:38.825630+00:00
3	2026-12-06T04:15:38.950689+00:00
4	2026-12-06T04:15:38.982332+00:00
5	2026-12-06T04:15:39.017216+00:00
6	2026-12-06T04:15:39.039220+00:00
\.


--
-- Data for Name: kimi_turns; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.kimi_turns (thread_id, "position", message_id, answer_id, text, answer, reasoning, reasoning_s, stats, status, model, options, created_at, updated_at, ttft_s, elapsed_s, completion_tokens) FROM stdin;
ce543467-ce5c-4738-bd6f-0ae1f888eadb	0	f0e1cf86-9a11-46a2-8066-ffb75dcacff8	48242578-76f8-419c-b2d1-129032319fc0	What is in this photo? #scenario=thinking	## What the picture shows\n\nA **rocket** stands on its launch pad, next to the service gantry.\n\n- Clear sky\n- Launch tower on the left\n\nA little math, as promised:\n\n$$\\int_0^1 x\\,dx = \\frac{1}{2}$$\n\n```python\nprint('liftoff')\n```\n	Okay, the user wants to know what is in this picture. Let me look carefully. The image shows a rocket on a launch pad, with a clear sky behind it. I should mention the gantry, and maybe compute something simple to show my work: the integral of x from 0 to 1 is 1/2.	0.7257666	\N	done	kimi-vl-thinking-2506	{"temperature": 0.8, "top_p": 1.0, "max_tokens": 16384, "show_reasoning": true, "show_stats": true}	2026-12-06T04:16:15.347328+00:00	2026-12-06T04:16:16.519689+00:00	0.008406341000068096	1.1705253229999926	168
ce543467-ce5c-4738-bd6f-0ae1f888eadb	1	60e893aa-b4d7-478f-8f10-942b410d791c	5dcf1b50-7da9-427d-8a67-dac548dbe8f6	And its colours? #scenario=plain	## What the picture shows\n\nA **rocket** stands on its launch pad, next to the service gantry.\n\n- Clear sky\n- Launch tower on the left\n\nA little math, as promised:\n\n$$\\int_0^1 x\\,dx = \\frac{1}{2}$$\n\n```python\nprint('liftoff')\n```\n		\N	\N	done	kimi-vl-thinking-2506	{"temperature": 0.8, "top_p": 1.0, "max_tokens": 16384, "show_reasoning": true, "show_stats": true}	2026-12-06T04:16:18.950333+00:00	2026-12-06T04:16:19.337981+00:00	0.04961778300003061	0.44251777099998435	78
\.


--
-- Data for Name: kimi_users; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.kimi_users (name, password_hash, created_at, token_generation) FROM stdin;
alice	$argon2id$v=19$m=65536,t=3,p=4$j7Bh1GuF+Da/22D9VfZmnA$H6MkEPJxyFLopeuf5JM7chEd/5ZIQYInj8wii9mI3vE	2026-12-06T04:15:40.242106+00:00	0
\.


--
-- Data for Name: steps; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.steps (id, name, type, "threadId", "parentId", streaming, "waitForAnswer", "isError", metadata, tags, input, output, "createdAt", start, "end", generation, "showInput", language, indent, command, "defaultOpen", "autoCollapse", modes) FROM stdin;
c5ac99bc-d3cc-4e7c-b745-1acc6ed8d75e	on_chat_start	run	ce543467-ce5c-4738-bd6f-0ae1f888eadb	\N	f	\N	f	{}	\N	{}		2026-12-06T04:16:13.956168Z	2026-12-06T04:16:13.957168Z	2026-12-06T04:16:14.255076Z	null	json	\N	\N	\N	f	f	\N
f0e1cf86-9a11-46a2-8066-ffb75dcacff8	alice	user_message	ce543467-ce5c-4738-bd6f-0ae1f888eadb	\N	f	f	f	{"location": "http://127.0.0.1:59435/"}	\N	\N	What is in this photo? #scenario=thinking	2026-12-06T04:16:15.297845Z	2026-12-06T04:16:15.297845Z	2026-12-06T04:16:15.297845Z	{}	\N	\N	\N	\N	\N	\N	\N
f4146166-6e60-49a0-b035-b10cb10cb10c	block	undefined	ce543467-ce5c-4738-bd6f-0ae1f888eadb	f08377f7-dcb2-4045-90df-17f0998263f7	f	\N	f	{}	\N		Okay, the user wants to know what is in this picture. Let me look carefully. The image shows a rocket on a launch pad, with a clear sky behind it. I should mention the gantry, and maybe compute something simple to show my work: the integral of x from 0 to 1 is 1/2.	2026-12-06T04:16:15.314680Z	\N	\N	null	false	\N	\N	\N	t	f	\N
f08377f7-dcb2-4045-90df-17f0998263f7	Thought for 0.8s	llm	ce543467-ce5c-4738-bd6f-0ae1f888eadb	5aaa79c5-c0f7-4e2e-8153-a706c864900b	f	\N	f	{"avatarName": "Kimi-VL"}	\N			2026-12-06T04:16:15.309218Z	2026-12-06T04:16:15.309247Z	2026-12-06T04:16:16.071501Z	null	json	\N	\N	\N	t	f	\N
5aaa79c5-c0f7-4e2e-8153-a706c864900b	on_message	run	ce543467-ce5c-4738-bd6f-0ae1f888eadb	f0e1cf86-9a11-46a2-8066-ffb75dcacff8	f	\N	f	{}	\N	What is in this photo? #scenario=thinking		2026-12-06T04:16:15.298845Z	2026-12-06T04:16:15.299845Z	2026-12-06T04:16:16.557120Z	null	json	\N	\N	\N	f	f	\N
2cb2251b-1e7d-4617-bdd4-b10cb10cb10c	Kimi-VL	system_message	ce543467-ce5c-4738-bd6f-0ae1f888eadb	5aaa79c5-c0f7-4e2e-8153-a706c864900b	f	f	f	{}	\N	\N	*TTFT 0.01 s · thought 0.7 s · 168 tokens · 143.7 tokens/s · total 1.2 s*	2026-12-06T04:16:16.523558Z	2026-12-06T04:16:16.523558Z	2026-12-06T04:16:16.523558Z	{}	\N	\N	\N	\N	\N	\N	\N
48242578-76f8-419c-b2d1-129032319fc0	Kimi-VL	assistant_message	ce543467-ce5c-4738-bd6f-0ae1f888eadb	5aaa79c5-c0f7-4e2e-8153-a706c864900b	f	f	f	{}	\N	\N	## What the picture shows\n\nA **rocket** stands on its launch pad, next to the service gantry.\n\n- Clear sky\n- Launch tower on the left\n\nA little math, as promised:\n\n$$\\int_0^1 x\\,dx = \\frac{1}{2}$$\n\n```python\nprint('liftoff')\n```\n	2026-12-06T04:16:16.522558Z	2026-12-06T04:16:16.522558Z	2026-12-06T04:16:16.522558Z	{}	\N	\N	\N	\N	\N	\N	\N
60e893aa-b4d7-478f-8f10-942b410d791c	alice	user_message	ce543467-ce5c-4738-bd6f-0ae1f888eadb	\N	f	f	f	{"location": "http://127.0.0.1:59435/thread/ce543467-ce5c-4738-bd6f-0ae1f888eadb"}	\N	\N	And its colours? #scenario=plain	2026-12-06T04:16:18.858174Z	2026-12-06T04:16:18.858174Z	2026-12-06T04:16:18.858174Z	{}	\N	\N	\N	\N	\N	\N	\N
5dcf1b50-7da9-427d-8a67-dac548dbe8f6	Kimi-VL	assistant_message	ce543467-ce5c-4738-bd6f-0ae1f888eadb	26b0f06b-3c96-46db-85bc-3dd1708691c0	f	f	f	{}	\N	\N	## What the picture shows\n\nA **rocket** stands on its launch pad, next to the service gantry.\n\n- Clear sky\n- Launch tower on the left\n\nA little math, as promised:\n\n$$\\int_0^1 x\\,dx = \\frac{1}{2}$$\n\n```python\nprint('liftoff')\n```\n	2026-12-06T04:16:19.341626Z	2026-12-06T04:16:19.341626Z	2026-12-06T04:16:19.341626Z	{}	\N	\N	\N	\N	\N	\N	\N
952de949-2d1a-4f41-82a6-b10cb10cb10c	Kimi-VL	system_message	ce543467-ce5c-4738-bd6f-0ae1f888eadb	26b0f06b-3c96-46db-85bc-3dd1708691c0	f	f	f	{}	\N	\N	*TTFT 0.05 s · 78 tokens · 196.0 tokens/s · total 0.4 s*	2026-12-06T04:16:19.352278Z	2026-12-06T04:16:19.352278Z	2026-12-06T04:16:19.352278Z	{}	\N	\N	\N	\N	\N	\N	\N
26b0f06b-3c96-46db-85bc-3dd1708691c0	on_message	run	ce543467-ce5c-4738-bd6f-0ae1f888eadb	60e893aa-b4d7-478f-8f10-942b410d791c	f	\N	f	{}	\N	And its colours? #scenario=plain		2026-12-06T04:16:18.859174Z	2026-12-06T04:16:18.860174Z	2026-12-06T04:16:19.384511Z	null	json	\N	\N	\N	f	f	\N
\.


--
-- Data for Name: threads; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.threads (id, "createdAt", name, "userId", "userIdentifier", tags, metadata) FROM stdin;
ce543467-ce5c-4738-bd6f-0ae1f888eadb	2026-12-06T04:16:15.350524Z	What is in this photo? #scenario=thinking	55aebc16-3f84-4a93-b52d-bf713a7c3751	alice	\N	{"is_shared": true, "shared_at": "2026-12-06T04:16:22.729386Z", "id": "e165d8bc-ff17-46fa-8fef-9cb18750d33a", "env": {}, "chat_settings": {"temperature": 0.8, "top_p": 1.0, "max_tokens": 16384.0, "hide_reasoning": false, "show_stats": true}, "client_type": "webapp", "model_picker_offered": []}
\.


--
-- Data for Name: users; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.users (id, identifier, metadata, "createdAt") FROM stdin;
55aebc16-3f84-4a93-b52d-bf713a7c3751	alice	{"provider": "credentials", "token_generation": 0}	2026-12-06T04:16:13.317276Z
\.


--
-- Name: elements elements_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.elements
    ADD CONSTRAINT elements_pkey PRIMARY KEY (id);


--
-- Name: feedbacks feedbacks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.feedbacks
    ADD CONSTRAINT feedbacks_pkey PRIMARY KEY (id);


--
-- Name: kimi_images kimi_images_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.kimi_images
    ADD CONSTRAINT kimi_images_pkey PRIMARY KEY (thread_id, turn, "position");


--
-- Name: kimi_schema kimi_schema_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.kimi_schema
    ADD CONSTRAINT kimi_schema_pkey PRIMARY KEY (version);


--
-- Name: kimi_turns kimi_turns_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.kimi_turns
    ADD CONSTRAINT kimi_turns_pkey PRIMARY KEY (thread_id, "position");


--
-- Name: kimi_users kimi_users_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.kimi_users
    ADD CONSTRAINT kimi_users_pkey PRIMARY KEY (name);


--
-- Name: steps steps_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.steps
    ADD CONSTRAINT steps_pkey PRIMARY KEY (id);


--
-- Name: threads threads_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.threads
    ADD CONSTRAINT threads_pkey PRIMARY KEY (id);


--
-- Name: users users_identifier_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_identifier_key UNIQUE (identifier);


--
-- Name: users users_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.users
    ADD CONSTRAINT users_pkey PRIMARY KEY (id);


--
-- Name: elements_object_key; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX elements_object_key ON public.elements USING btree ("objectKey");


--
-- Name: elements_thread; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX elements_thread ON public.elements USING btree ("threadId");


--
-- Name: feedbacks_for; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX feedbacks_for ON public.feedbacks USING btree ("forId");


--
-- Name: kimi_turns_message; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX kimi_turns_message ON public.kimi_turns USING btree (thread_id, message_id);


--
-- Name: steps_thread; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX steps_thread ON public.steps USING btree ("threadId", "createdAt");


--
-- Name: threads_user; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX threads_user ON public.threads USING btree ("userId");


--
-- PostgreSQL database dump complete
--

\unrestrict XIhXbftIbDo4WlyALdsKp5Xri4eBV1Yii0wJw6c4AfU6XemkOXhd7uHY3Ms8I6u

