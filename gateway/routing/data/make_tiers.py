# ruff: noqa: E501  (a data file: one labelled template a line)
"""Generate gateway/routing/data/tiers.jsonl: templates x varied slots, one group id per template.

Run: python .local/helper_R/make_tiers.py > gateway/routing/data/tiers.jsonl
Label guidelines (see the README): small = chit-chat, short facts, extraction, rewriting,
translation, classification, formatting; medium = summaries, ordinary code, explanations,
comparisons, drafting; large = multi-step reasoning, maths, proofs, system design, research-grade
analysis and long multi-constraint planning.
"""

from __future__ import annotations

import json
import random
import sys

R = random.Random(20261129)

TOPICS = [
    "photosynthesis",
    "inflation",
    "the French Revolution",
    "black holes",
    "vaccines",
    "blockchain",
    "climate change",
    "the stock market",
    "machine learning",
    "the immune system",
    "plate tectonics",
    "supply chains",
    "quantum computing",
    "the Roman Empire",
    "compound interest",
    "DNS",
    "container orchestration",
    "the water cycle",
    "antibiotic resistance",
    "renewable energy",
]
CITIES = ["Paris", "Tokyo", "Nairobi", "Lima", "Oslo", "Toronto", "Hanoi", "Cairo", "Madrid", "Sydney"]
COUNTRIES = ["France", "Japan", "Kenya", "Peru", "Norway", "Canada", "Vietnam", "Egypt", "Spain", "Australia"]
LANGS = ["French", "Spanish", "German", "Italian", "Portuguese", "Japanese", "Dutch", "Polish"]
PLANGS = ["Python", "JavaScript", "TypeScript", "Go", "Rust", "Java", "C#", "Ruby", "Kotlin"]
NAMES = ["Maria", "Tom", "Aisha", "Kenji", "Lena", "Carlos", "Priya", "Olu", "Sven", "Mei"]
PRODUCTS = [
    "wireless headphones",
    "a standing desk",
    "a coffee grinder",
    "running shoes",
    "a smart watch",
    "a backpack",
    "an electric kettle",
    "a mechanical keyboard",
    "a yoga mat",
    "a phone case",
]
SYSTEMS = [
    "a URL shortener",
    "a ride-sharing dispatch service",
    "a global chat application",
    "a payments ledger",
    "a video streaming platform",
    "a distributed rate limiter",
    "a multi-tenant feature-flag service",
    "a search autocomplete service",
    "a news feed",
    "an online auction system",
    "a collaborative document editor",
    "a metrics ingestion pipeline",
]
SCALES = [
    "10 million daily users",
    "50k writes per second",
    "three regions with 99.99% availability",
    "a 200 ms p99 latency budget",
    "1 billion stored objects",
    "strict exactly-once semantics",
]
TASKS = [
    "reverses a linked list",
    "parses an ISO 8601 date",
    "removes duplicates from a list while keeping order",
    "validates an email address",
    "merges two sorted arrays",
    "counts word frequencies in a file",
    "flattens a nested dictionary",
    "retries an HTTP request with exponential backoff",
    "computes a moving average",
    "converts Roman numerals to integers",
    "reads a CSV and sums a column",
    "checks whether a string is a palindrome",
]
SENTENCES = [
    "The quarterly report shows revenue grew by 12 percent while costs stayed flat.",
    "Our team met on Tuesday to discuss the migration to the new database cluster.",
    "Customers have complained about slow checkout times during evening peaks.",
    "The city council approved a new budget for public transport and bike lanes.",
    "Researchers found that the new alloy resists corrosion twice as long as steel.",
    "The marketing campaign reached two million people but converted poorly.",
    "Several employees asked for clearer guidance on remote work policies.",
    "The outage on Friday was caused by an expired TLS certificate on the load balancer.",
    "Sales in the northern region fell while the southern region exceeded targets.",
    "The board will vote next month on whether to open an office in Singapore.",
    "A pilot program let nurses schedule their own shifts, which reduced overtime.",
    "The library will extend its opening hours during the exam period.",
    "Engineers proposed replacing the legacy queue with a managed streaming service.",
    "Feedback from the beta users highlighted confusing onboarding screens.",
    "The supplier warned that shipping delays could last until the end of the quarter.",
]
SNIPPETS = [
    "def avg(xs):\n    return sum(xs) / len(xs)",
    "for i in range(len(items)):\n    if items[i] = target:\n        return i",
    "const total = prices.map(p => p.amount).reduce((a, b) => a + b)",
    "SELECT name, COUNT(*) FROM orders GROUP BY customer_id",
    "while (i < n) {\n  sum += arr[i];\n}",
    "async function load() {\n  const r = fetch(url);\n  return r.json();\n}",
]
EMOTIONS = ["happy", "tired", "bored", "excited", "nervous", "stressed"]
THEOREMS = [
    "Fermat's little theorem",
    "the Cauchy-Schwarz inequality",
    "the pigeonhole principle",
    "Euler's formula for planar graphs",
    "the AM-GM inequality",
    "Lagrange's theorem",
    "the intermediate value theorem",
    "Wilson's theorem",
    "the binomial theorem",
    "the Chinese remainder theorem",
    "the master theorem",
    "Cantor's diagonal argument",
]
FORMULAS = [
    "the quadratic formula",
    "Stirling's approximation",
    "the variance of a binomial distribution",
    "the Euler-Lagrange equation",
    "Kepler's third law",
    "the normal equations for least squares",
    "the formula for the sum of a geometric series",
    "the softmax gradient",
    "the Schwarzschild radius",
]
FAMOUS = [
    "Twitter",
    "YouTube",
    "Uber",
    "WhatsApp",
    "Dropbox",
    "Google Docs",
    "a web crawler",
    "Netflix",
    "Instagram stories",
    "a stock exchange matching engine",
    "Slack",
    "a CDN",
]
CONCEPTS = [
    "recursion",
    "closures",
    "OAuth",
    "the TCP handshake",
    "Docker volumes",
    "React hooks",
    "gradient descent",
    "Kubernetes pods",
    "CORS",
    "database indexes",
    "async/await",
    "dependency injection",
    "inflation",
    "photosynthesis",
]
WORKS = [
    "the plot of Macbeth",
    "the book 1984",
    "the theory of evolution",
    "the Odyssey",
    "Pride and Prejudice",
    "the Cold War",
    "the French Revolution",
    "the first Harry Potter book",
    "the movie Inception",
]
CODE_THINGS = [
    "a binary search",
    "a REST endpoint for creating users",
    "a command-line argument parser",
    "quicksort",
    "a simple web scraper",
    "a rate limiter",
    "a JSON schema validator",
    "a todo app backend",
]
NUMS = [str(n) for n in (12, 17, 23, 48, 64, 75, 120, 365, 1024)]


def para(n: int) -> str:
    return " ".join(R.sample(SENTENCES, n))


def fill(template: str) -> str:
    slots = {
        "topic": TOPICS,
        "city": CITIES,
        "country": COUNTRIES,
        "lang": LANGS,
        "plang": PLANGS,
        "name": NAMES,
        "product": PRODUCTS,
        "system": SYSTEMS,
        "scale": SCALES,
        "task": TASKS,
        "snippet": SNIPPETS,
        "emotion": EMOTIONS,
        "n": NUMS,
        "m": NUMS,
        "theorem": THEOREMS,
        "formula": FORMULAS,
        "famous": FAMOUS,
        "concept": CONCEPTS,
        "work": WORKS,
        "code_thing": CODE_THINGS,
    }
    out = template
    for key, values in slots.items():
        while "{" + key + "}" in out:
            out = out.replace("{" + key + "}", R.choice(values), 1)
    while "{para2}" in out:
        out = out.replace("{para2}", para(2), 1)
    while "{para4}" in out:
        out = out.replace("{para4}", para(4), 1)
    while "{para7}" in out:
        out = out.replace("{para7}", para(7), 1)
    return out


SMALL = {
    "greeting": [
        "hi there!",
        "Hello, how are you today?",
        "hey, good morning :)",
        "Hi! Who am I talking to?",
        "yo what's up",
        "Good evening! Hope you're well.",
    ],
    "feeling": [
        "I'm feeling {emotion} today.",
        "ugh, I'm so {emotion} right now",
        "Just wanted to say I'm {emotion}, lol",
    ],
    "thanks": ["thanks, that helped!", "Thank you so much!", "ok cool, thanks", "great, appreciate it"],
    "joke": [
        "Tell me a joke about {topic}.",
        "Got any puns about cats?",
        "Say something funny about Mondays.",
    ],
    "capital": [
        "What is the capital of {country}?",
        "capital of {country}?",
        "Which city is the capital of {country}?",
    ],
    "timezone": ["What time zone is {city} in?", "Is {city} ahead of London in time?"],
    "define": [
        "What does the word 'ubiquitous' mean?",
        "Define 'ephemeral' in one sentence.",
        "What's a synonym for 'happy'?",
        "Give me an antonym of 'generous'.",
        "What does 'API' stand for?",
    ],
    "spell": [
        "How do you spell 'necessary'?",
        "Is it 'definately' or 'definitely'?",
        "Correct the spelling: recieve",
    ],
    "translate": [
        "Translate 'good morning, my friend' into {lang}.",
        "How do you say 'thank you very much' in {lang}?",
        "Translate to {lang}: Where is the train station?",
        "What is 'cheese' in {lang}?",
    ],
    "rewrite_formal": [
        "Rewrite this more formally: hey, can u send me the report asap?",
        "Make this sound polite: give me the files now.",
        "Rephrase professionally: this meeting was a total waste of time.",
    ],
    "grammar": [
        "Fix the grammar: me and him goes to the store yesterday.",
        "Correct this sentence: Their going too the park tomorrow.",
        "Fix typos: Teh meeting is moved to thrusday afternon.",
    ],
    "shorten": [
        "Shorten this sentence: {para2}",
        "Make this one line: {para2}",
        "Cut this down to ten words: {para2}",
    ],
    "extract_email": [
        "Extract the email addresses from: contact {name} at {name}@example.com or sales@shop.io.",
        "Pull out all the email addresses in this text: reach me at a.b@corp.com, cc lee@uni.edu.",
    ],
    "extract_dates": [
        "List the dates mentioned: The kickoff is on 3 March, review on 14 April and launch on 1 June.",
        "Which dates appear here? We met on May 5 and will meet again on June 12.",
    ],
    "extract_names": [
        "Extract the people's names from this sentence: {name} and {name} met {name} in {city}.",
        "Who is mentioned here? {name} emailed {name} about the {product} order.",
    ],
    "extract_json": [
        "Extract name, city and age as JSON from: {name}, 34, lives in {city}.",
        "Turn this into JSON with fields product and price: {product} costs {n} dollars.",
    ],
    "sentiment": [
        "Is this review positive or negative? 'The {product} broke after two days.'",
        "Classify the sentiment: I absolutely love my new {product}!",
        "Sentiment of: 'meh, it was fine I guess'?",
    ],
    "category": [
        "Which category fits '{product}': electronics, kitchen, sports or clothing?",
        "Label this support ticket as billing, bug or feature request: 'I was charged twice.'",
    ],
    "convert_units": [
        "Convert {n} miles to kilometres.",
        "How many ounces are in {n} grams?",
        "What is {n} degrees Fahrenheit in Celsius?",
    ],
    "arith": ["What is {n} plus {m}?", "{n} times 3?", "What's 15% of {n}?"],
    "title": [
        "Suggest a title for a blog post about {topic}.",
        "Give me a catchy headline about {product}s.",
        "Name for a podcast about {topic}? Just one.",
    ],
    "format_list": [
        "Turn these into a bulleted list: apples, pears, milk, bread.",
        "Put these words in alphabetical order: zebra, apple, mango, kiwi.",
        "Make this comma-separated: red\ngreen\nblue",
    ],
    "csv": [
        "Convert to CSV: {name} 31 {city}; {name} 27 {city}.",
        "Make a two-column table of these: {city} - {country}, {city} - {country}",
    ],
    "yesno": ["Is a tomato a fruit?", "Can penguins fly?", "Is {n} an even number?", "Is {city} in Europe?"],
    "fact": [
        "Who wrote Romeo and Juliet?",
        "How many legs does a spider have?",
        "What year did World War II end?",
        "What's the boiling point of water at sea level?",
        "Who painted the Mona Lisa?",
    ],
    "emoji": [
        "Reply with an emoji that fits 'I passed my exam'.",
        "Give me three emojis for a birthday message.",
    ],
    "caption": [
        "Write a short Instagram caption for a photo of {city} at sunset.",
        "One-line caption for a picture of my dog at the beach.",
    ],
    "reply": [
        "Write a one-line reply to 'Are you free for lunch tomorrow?'",
        "Quick reply declining a meeting invite, please.",
    ],
    "tone": [
        "Make this friendlier: Your request has been denied.",
        "Make this text sound more enthusiastic: we released version 2.",
    ],
    "abbrev": ["What does ASAP mean?", "Expand the acronym NASA.", "What is 'etc.' short for?"],
    "remind": ["Remind me what a noun is.", "What's the plural of 'mouse'?", "Past tense of 'swim'?"],
    "recommend_short": ["Recommend one good book about {topic}.", "Name a movie set in {city}."],
    "extract_numbers": [
        "Pull out the numbers from: we sold {n} units in {city} and {m} in {city}.",
        "What is the price in this text? The {product} now costs {n} euros.",
    ],
    "keywords": ["Give three keywords for this sentence: {para2}", "Tag this text with two topics: {para2}"],
    "casual_q": [
        "What's your favourite colour?",
        "Do you like music?",
        "Are you a robot?",
        "What should I eat for dinner tonight?",
    ],
    "trivia": [
        "What is the largest planet?",
        "How many continents are there?",
        "Which ocean is the biggest?",
    ],
    "lang_detect": ["What language is this: 'Danke schön'?", "Which language is 'obrigado'?"],
    "fill_form": [
        "Fill in: Name: {name}, City: ___ (they live in {city})",
        "Format this phone number: 5551234567",
    ],
}

MEDIUM = {
    "summarize_text": [
        "Summarize the following in three bullet points:\n\n{para7}",
        "Can you give me a short summary of this?\n{para7}",
        "TL;DR this for my manager:\n{para7}",
    ],
    "summarize_meeting": [
        "Here are my meeting notes, write a summary with action items:\n{para7}",
        "Summarise these notes and list who owns what:\n- {para2}\n- {para2}\n- {para2}",
    ],
    "summarize_topic": [
        "Give me an overview of {topic} in a few paragraphs.",
        "Summarize the main ideas behind {topic}.",
    ],
    "explain_concept": [
        "Explain how {topic} works.",
        "Can you explain {topic} to a high-school student?",
        "What is {topic} and why does it matter?",
        "Explain {topic} with an analogy.",
    ],
    "explain_tech": [
        "How does HTTPS keep my data safe?",
        "Explain how a hash map works internally.",
        "What happens when I type a URL into a browser?",
        "Explain the difference between TCP and UDP.",
        "How does garbage collection work in {plang}?",
    ],
    "write_function": [
        "Write a {plang} function that {task}.",
        "Implement a function in {plang} that {task}, with a docstring.",
        "I need {plang} code that {task}. Add a couple of tests.",
    ],
    "explain_code": [
        "Explain what this code does:\n```\n{snippet}\n```",
        "Walk me through this snippet line by line:\n```\n{snippet}\n```",
    ],
    "debug": [
        "This code has a bug, can you fix it?\n```\n{snippet}\n```",
        "Why does this not work?\n```\n{snippet}\n```\nPlease correct it.",
    ],
    "sql": [
        "Write an SQL query that returns the top {n} customers by total order value.",
        "Write a query to find duplicate emails in a users table.",
        "How do I join orders and customers in SQL and count orders per country?",
    ],
    "regex": [
        "Write a regex that matches US phone numbers and explain each part.",
        "Give me a regular expression for dates like 2024-01-31, with an explanation.",
    ],
    "compare": [
        "Compare {plang} and {plang} for building web backends.",
        "What are the pros and cons of {topic}?",
        "Compare renting and buying a home for someone in {city}.",
    ],
    "email_draft": [
        "Write an email to my landlord asking to fix the heating, polite but firm.",
        "Draft an email to {name} following up on the {product} order that arrived damaged.",
        "Write a cover letter for a junior data analyst position.",
    ],
    "blog_outline": [
        "Outline a blog post about {topic} with section headings.",
        "Write a 300-word blog intro about {topic}.",
    ],
    "product_desc": [
        "Write a product description for {product} highlighting three benefits.",
        "Write an Amazon listing for {product}, with bullet points.",
    ],
    "howto": [
        "How do I set up a Python virtual environment and install packages?",
        "Give me step-by-step instructions to deploy a static site on a cheap host.",
        "How do I make sourdough bread at home?",
        "How can I improve my sleep schedule?",
    ],
    "docs": [
        "Write docstrings for this function:\n```\n{snippet}\n```",
        "Write a README section explaining how to install and run a CLI tool written in {plang}.",
    ],
    "tests": [
        "Write unit tests in {plang} for a function that {task}.",
        "Write pytest tests for this:\n```\n{snippet}\n```",
    ],
    "convert_code": [
        "Convert this to {plang}:\n```\n{snippet}\n```",
        "Port this snippet to idiomatic {plang}:\n```\n{snippet}\n```",
    ],
    "lesson": [
        "Create a lesson plan for teaching {topic} to 12-year-olds.",
        "Make 5 quiz questions with answers about {topic}.",
    ],
    "story": [
        "Write a short story about a robot who learns to paint.",
        "Write a bedtime story about a dragon in {city}.",
    ],
    "poem": ["Write a poem about {topic}.", "Write a sonnet about autumn in {city}."],
    "review_writing": [
        "Give feedback on my paragraph and suggest improvements:\n{para4}",
        "Edit this for clarity and flow, and explain the main changes:\n{para4}",
    ],
    "travel": ["Plan a 3-day itinerary for {city}.", "What should I pack for a week in {country} in winter?"],
    "recipe": [
        "Give me a vegetarian recipe for dinner with chickpeas.",
        "How do I cook risotto? Include quantities.",
    ],
    "career": [
        "How should I prepare for a software engineering interview?",
        "What skills do I need to become a data scientist?",
    ],
    "shell": [
        "Write a bash script that backs up a directory to a dated tarball.",
        "Explain what `find . -name '*.log' -mtime +7 -delete` does and how to test it safely.",
    ],
    "api_usage": [
        "Show me how to call a REST API in {plang} and handle errors.",
        "How do I read a JSON file in {plang}? Show an example.",
    ],
    "pros_cons_decision": [
        "Should I use PostgreSQL or MongoDB for a small e-commerce site? Explain briefly.",
        "Is it worth learning {plang} in 2025? Give reasons.",
    ],
    "history": ["Describe the causes of {topic}.", "Give me a short history of {country}."],
    "study_notes": ["Make study notes on {topic} for an exam.", "Create flashcards about {topic}."],
    "feedback_code": ["Review this function and suggest improvements:\n```\n{snippet}\n```"],
    "report_section": [
        "Write the background section of a report about {topic}, about 200 words.",
        "Write a press release announcing {product}.",
    ],
    "dialogue": ["Write a dialogue between a customer and a support agent about a late {product} delivery."],
    "excel": [
        "How do I use VLOOKUP in Excel? Give an example.",
        "Explain pivot tables and when to use them.",
    ],
    "git": [
        "How do I undo the last git commit but keep my changes?",
        "Explain git rebase versus merge with examples.",
    ],
    "explain_short": [
        "Explain {concept}.",
        "How does {concept} work?",
        "Explain {concept} briefly, with an example.",
        "ELI5 {concept}",
    ],
    "summarize_short": [
        "Summarize {work}.",
        "Give me a summary of {work}.",
        "What happens in {work}? Summarize it.",
    ],
    "code_short": ["Write {code_thing}.", "Code {code_thing} in {plang}.", "Implement {code_thing}."],
    "class_design": [
        "Write a {plang} class for a bank account with deposit, withdraw and history.",
        "Implement a simple LRU cache class in {plang}.",
    ],
}

LARGE = {
    "proof_nt": [
        "Prove that there are infinitely many prime numbers.",
        "Prove that the square root of {n} is irrational if {n} is not a perfect square.",
        "Prove that the sum of the first n odd numbers equals n squared, by induction.",
        "Show that for every integer n, n^3 - n is divisible by 6.",
    ],
    "proof_analysis": [
        "Prove that every continuous function on a closed interval is bounded.",
        "Prove that the harmonic series diverges, and then show that the sum of 1/n^2 converges.",
        "Show rigorously that a uniformly convergent sequence of continuous functions has a continuous limit.",
    ],
    "proof_algebra": [
        "Prove that every group of prime order is cyclic.",
        "Prove that the determinant of a product of matrices is the product of determinants.",
        "Show that a finite integral domain is a field.",
    ],
    "proof_cs": [
        "Prove that comparison-based sorting needs Omega(n log n) comparisons in the worst case.",
        "Prove that the halting problem is undecidable, step by step.",
        "Prove that Dijkstra's algorithm is correct when all edge weights are non-negative.",
    ],
    "calculus": [
        "Compute the integral of x^2 * e^(-x) from 0 to infinity and show every step.",
        "Find all local extrema of f(x, y) = x^3 - 3xy + y^3 and classify them.",
        "Solve the differential equation y'' + 4y' + 4y = e^(-2x) with y(0)=1, y'(0)=0.",
    ],
    "probability": [
        "I roll {n} fair dice. What is the probability that the sum is divisible by 3? Derive it.",
        "A test for a disease is 98% sensitive and 95% specific, and prevalence is 1 in {n}. If two independent tests are positive, what is the probability of disease? Show your reasoning.",
        "Three players take turns flipping a coin until someone gets heads. What is each player's chance of winning, and what is the expected number of flips?",
    ],
    "combinatorics": [
        "How many ways can {n} people be seated around a round table if two particular people refuse to sit together? Explain.",
        "Count the lattice paths from (0,0) to ({n},{n}) that never go above the diagonal, and prove your formula.",
    ],
    "linear_algebra": [
        "Find the eigenvalues and eigenvectors of [[2,1,0],[1,3,1],[0,1,4]] and diagonalize it if possible.",
        "Explain and prove why a real symmetric matrix has real eigenvalues and orthogonal eigenvectors.",
    ],
    "puzzle": [
        "A farmer must cross a river with a wolf, a goat and a cabbage; the boat holds one item. Find a plan and prove no shorter one exists.",
        "Five houses in a row, each with a different colour, owner nationality, drink, pet and cigarette; here are 15 clues... solve the zebra puzzle and explain the deduction chain.",
        "You have 12 coins, one is counterfeit and heavier or lighter. With three weighings on a balance, find it and say whether it is heavier. Give the full strategy.",
        "Three boxes are labelled apples, oranges and mixed, and all labels are wrong. Reason step by step about the minimum picks needed to relabel them.",
    ],
    "multistep_word": [
        "A train leaves {city} at 60 km/h and another leaves {city}, {n} km away, at 90 km/h an hour later. When and where do they meet? Then redo it if the second train stops for 20 minutes halfway.",
        "A tank fills through pipe A in {n} hours and pipe B in {m} hours, and drains through C in 9 hours. Starting empty with all three open, then closing C after 2 hours, when is it full? Work through each step.",
    ],
    "system_design": [
        "Design {system} that handles {scale}. Cover data model, APIs, storage, caching, consistency and failure modes.",
        "How would you architect {system} for {scale}? Discuss trade-offs and bottlenecks.",
        "Walk me through a system design interview answer for {system}, including capacity estimates for {scale}.",
    ],
    "distributed": [
        "Compare Raft and Paxos in depth, and explain how leader election and log replication stay safe under network partitions.",
        "Design a globally consistent counter across {n} data centres and reason about latency versus correctness.",
        "Explain how to implement exactly-once processing in a stream pipeline with Kafka and a transactional sink, and where it can still break.",
    ],
    "algorithm_design": [
        "Design an algorithm to find the k most frequent items in a stream with bounded memory, prove its error bound and analyse complexity.",
        "Give an O(n log n) algorithm for the longest increasing subsequence, prove it correct and explain how to recover the sequence.",
        "Design a data structure supporting insert, delete and get-median in O(log n), and prove the complexity.",
    ],
    "optimization": [
        "Formulate a production-planning problem with {n} products and capacity constraints as a linear program, solve a small instance and interpret the dual variables.",
        "Derive the gradient-descent update for logistic regression with L2 regularisation and prove convergence for a suitable step size.",
    ],
    "ml_theory": [
        "Derive backpropagation for a two-layer network with softmax cross-entropy from first principles.",
        "Explain the bias-variance decomposition mathematically and derive it for squared loss.",
        "Derive the evidence lower bound used in variational autoencoders and explain each term.",
    ],
    "research_plan": [
        "Design a research study to test whether {topic} education changes voting behaviour. Include hypotheses, sampling, confounders and the statistical analysis plan.",
        "Propose a rigorous experiment to evaluate a new recommendation algorithm, with power analysis, metrics and pitfalls like novelty effects.",
    ],
    "strategy": [
        "Our startup sells {product} in {country}. Build a three-year expansion strategy across {n} markets with pricing, unit economics, risks and a decision framework.",
        "Analyse whether a mid-size retailer should build or buy its e-commerce platform, modelling costs over five years and the strategic risks.",
    ],
    "legal_complex": [
        "Analyse the liability of each party in this scenario, citing the relevant principles of negligence and contract: a contractor subcontracts wiring, the wiring causes a fire, and the owner's insurer refuses to pay.",
        "Compare GDPR and CCPA obligations for a company processing health data across the EU and California, and design a compliance plan.",
    ],
    "refactor_arch": [
        "We have a 200k-line monolith in {plang} with a shared database. Plan a migration to services, step by step, with data ownership, consistency and rollback strategies.",
        "Design the architecture of a plugin system for a large {plang} application, including versioning, isolation, security and a migration path for existing extensions.",
    ],
    "concurrency": [
        "Explain why this double-checked locking is broken under the {plang} memory model and prove a correct version is race-free.",
        "Design a lock-free multi-producer multi-consumer queue, explain the ABA problem and prove linearizability of your design.",
    ],
    "security": [
        "Threat-model {system}: enumerate attackers, assets and attack paths, then design mitigations and rank them by risk.",
        "Design an authentication system with passkeys, session management and account recovery that resists phishing, and justify each choice.",
    ],
    "physics": [
        "Derive the period of a pendulum with large amplitude using elliptic integrals and compare with the small-angle result.",
        "A satellite moves from a {n} km circular orbit to a geostationary one. Compute the Hohmann transfer delta-v step by step.",
    ],
    "econ": [
        "Model the effect of a {n}% tariff on domestic prices, consumer surplus and deadweight loss using supply and demand curves, with a worked numerical example.",
        "Derive the Black-Scholes formula from a replicating portfolio argument and explain its assumptions.",
    ],
    "multi_constraint_plan": [
        "Schedule {n} exams for 300 students in 5 rooms over 2 weeks so no student has two exams on the same day; formulate it, propose an algorithm and justify its optimality.",
        "Plan a data-centre migration of 400 services with dependency ordering, zero downtime for tier-1 services and a fixed weekly change window; produce the sequencing method and risk plan.",
    ],
    "logic": [
        "Knights always tell the truth and knaves always lie. A says 'B is a knave', B says 'A and C are the same type', C says nothing. Deduce all possibilities with proof.",
        "Prove or refute: if every finite subset of a set of first-order sentences is satisfiable, the whole set is. Explain the compactness theorem's proof.",
    ],
    "math_competition": [
        "Find all functions f from the reals to the reals with f(x + y) = f(x) + f(y) and f(xy) = f(x)f(y). Prove your answer.",
        "Find all positive integers n such that n^2 + {n} is a perfect square, with a complete proof.",
        "Let a, b, c be positive reals with a + b + c = 3. Prove that a^2 + b^2 + c^2 + abc >= 4.",
    ],
    "complexity": [
        "Prove that 3-SAT is NP-complete by reduction from SAT, with all the details.",
        "Show that deciding whether a graph has a Hamiltonian cycle is NP-complete.",
    ],
    "compiler": [
        "Design a type checker for a small functional language with let-polymorphism; explain Hindley-Milner unification and prove termination.",
        "Design the register allocator for a toy compiler using graph colouring, including spilling and coalescing heuristics.",
    ],
    "long_analysis": [
        "Here is our incident timeline:\n{para7}\nPerform a root-cause analysis with contributing factors, a causal chain, and a prioritised remediation plan with owners and metrics.",
        "Given this context:\n{para7}\nBuild a decision matrix of at least four options, quantify the trade-offs, run a sensitivity analysis and recommend one with reasoning.",
    ],
    "db_internals": [
        "Explain how MVCC and write-ahead logging interact in PostgreSQL, then design how you would add snapshot isolation to a key-value store.",
        "Design a storage engine for time-series data with compression, retention and out-of-order writes, and analyse read and write amplification.",
    ],
    "crypto": [
        "Explain how elliptic-curve Diffie-Hellman works mathematically and prove why the shared secret matches.",
        "Derive why RSA decryption recovers the message using Euler's theorem, and discuss padding attacks.",
    ],
    "stats": [
        "I ran an A/B test with {n} users per arm; conversions were 4.1% and 4.6%. Compute the p-value, a confidence interval and the power, and explain whether sequential peeking invalidates the result.",
        "Derive the maximum likelihood estimator for the parameters of a Gaussian mixture and explain the EM algorithm's convergence.",
    ],
    "prove_short": [
        "Prove {theorem}.",
        "Give a proof of {theorem}.",
        "Can you prove {theorem}?",
        "Prove {theorem} rigorously.",
    ],
    "derive_short": [
        "Derive {formula}.",
        "Derive {formula} from first principles.",
        "How is {formula} derived? Show all steps.",
    ],
    "design_short": [
        "Design {famous}.",
        "System design: {famous}.",
        "How would you design {famous} at scale?",
        "Architect {famous} end to end.",
    ],
    "solve_short": [
        "Solve the recurrence T(n) = 2T(n/2) + n log n.",
        "Solve x^3 - 6x^2 + 11x - 6 = 0 and verify the roots.",
        "Evaluate the sum of 1/k^2 for k from 1 to infinity and justify it.",
        "Find the closed form of the nth Fibonacci number and prove it.",
    ],
    "game_theory": [
        "Find all Nash equilibria, including mixed ones, of a 3x3 game I will describe, and explain the method; then analyse the repeated version with discounting.",
        "Two firms compete in quantities with costs of {n} and {m}. Derive the Cournot equilibrium and compare it with Stackelberg leadership.",
    ],
}

# One-off prompts, each its own group: less templated coverage.
ONE_OFF = [
    ("small", "lol"),
    ("small", "ok"),
    ("small", "good night!"),
    ("small", "What's 2+2?"),
    ("small", "Can you say hello in Korean?"),
    ("small", "Is it going to rain? Just kidding, you can't know."),
    ("small", "Thanks for your help earlier, bye!"),
    ("small", "Rewrite in passive voice: The cat chased the mouse."),
    ("small", "Uppercase this: hello world"),
    ("small", "Reply only with yes or no: is water wet?"),
    ("small", "What is the opposite of 'ancient'?"),
    ("small", "Which is heavier, a kilo of feathers or a kilo of steel?"),
    ("small", "Give me a random name for a cat."),
    ("small", "Extract the hashtag from: loving the #sunset tonight"),
    ("small", "Turn 'ASAP pls' into a full sentence."),
    ("small", "How many days are in a leap year?"),
    ("medium", "Explain recursion to me with a simple example in Python."),
    ("medium", "Summarize the plot of Hamlet in a paragraph."),
    ("medium", "What's the difference between a process and a thread?"),
    ("medium", "Write a Dockerfile for a Flask app and explain each line."),
    ("medium", "How do vaccines train the immune system? Keep it accessible."),
    ("medium", "Write a JavaScript debounce function and explain when to use it."),
    ("medium", "Explain the CAP theorem in simple terms with an example."),
    ("medium", "Draft a polite message to my team announcing that I'm leaving the company."),
    ("medium", "Give me a weekly workout plan for a beginner, three days a week."),
    ("medium", "Explain what a closure is in JavaScript, with two examples."),
    (
        "medium",
        "Convert this paragraph into a numbered list of steps: first preheat the oven, then mix flour and sugar, add eggs, pour into a tin and bake for 30 minutes.",
    ),
    ("medium", "Write a function to check if a binary tree is balanced."),
    (
        "large",
        "Prove that the sum of the angles of a triangle is 180 degrees in Euclidean geometry, and explain why it fails on a sphere.",
    ),
    (
        "large",
        "Design a fault-tolerant distributed job scheduler with leases, retries and at-least-once semantics; analyse the failure cases.",
    ),
    (
        "large",
        "Is P equal to NP? Explain what a proof either way would require and why the known barriers (relativization, natural proofs) matter.",
    ),
    (
        "large",
        "Solve: x^4 - 5x^2 + 4 = 0 over the complex numbers, then generalise to x^4 + px^2 + q and discuss when all roots are real.",
    ),
    (
        "large",
        "Derive the formula for the volume of an n-dimensional ball and find which dimension maximises the unit ball's volume.",
    ),
    ("large", "Think step by step: how many trailing zeros does 1000! have in base 12? Justify each step."),
    (
        "large",
        "Design the consistency model and conflict resolution for an offline-first mobile app syncing with a server; compare CRDTs and operational transforms.",
    ),
    (
        "large",
        "Construct a counterexample showing that pointwise convergence does not preserve integrals, then state and prove a theorem giving sufficient conditions.",
    ),
    (
        "large",
        "Plan the capacity, sharding and replication for a 5 PB object store with erasure coding, and compute durability under correlated disk failures.",
    ),
    (
        "large",
        "Evaluate three strategies for reducing LLM inference cost at scale (quantisation, speculative decoding, routing) with a quantitative model of latency, quality and cost.",
    ),
]

PER_TEMPLATE = 5


def rows() -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for tier, table in (("small", SMALL), ("medium", MEDIUM), ("large", LARGE)):
        for category, templates in table.items():
            for t_index, template in enumerate(templates):
                group = f"{tier}/{category}/{t_index}"
                has_slots = "{" in template
                seen: set[str] = set()
                for _ in range(PER_TEMPLATE * 4 if has_slots else 1):
                    prompt = fill(template)
                    if prompt not in seen:
                        seen.add(prompt)
                        out.append({"prompt": prompt, "tier": tier, "group": group})
                    if len(seen) >= (PER_TEMPLATE if has_slots else 1):
                        break
    for i, (tier, prompt) in enumerate(ONE_OFF):
        out.append({"prompt": prompt, "tier": tier, "group": f"{tier}/one-off/{i}"})
    return out


if __name__ == "__main__":
    all_rows = rows()
    for row in all_rows:
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for row in all_rows:
        counts[row["tier"]] = counts.get(row["tier"], 0) + 1
    print(counts, len({r["group"] for r in all_rows}), "groups", file=sys.stderr)
