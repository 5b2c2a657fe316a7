"""Training the macro policy on the project's own measurements: collect -> decisions -> BC -> RL -> GGUF.

``collect`` explores action sequences with the MTMC loop and real verification; ``dataset`` turns the
recorded episodes into (state -> next action) decisions in exactly the prompt, candidate texts and
tokens the embedded policy uses at run time; ``bc`` and ``rl`` fine-tune a LoRA on them
(transformers + peft, imported lazily); ``export`` writes the LoRA as a llama.cpp adapter GGUF
marked trained with ``mtmc.*`` metadata; ``evaluate`` compares policies on held-out files.
"""
