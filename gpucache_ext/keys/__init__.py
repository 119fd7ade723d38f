"""What a key is made of: the config (its fields, each with its flag:
`config`), the stages (`stagespec`), tokens and their named components
(`tokens`), why a stage was built (`reasons`) and what typing and lowering
read of the target (`targets`).  Imports nothing above it."""
