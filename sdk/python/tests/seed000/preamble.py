# Added by the tests, not part of the seed: the samples that use `lbb` without making it get it
# here, from the environment the "Four ways in" sample reads.
import os
from lbb import LbbClient

lbb = LbbClient(os.environ["ENDPOINT_URL"], api_key=os.environ["API_KEY"], graph="main")
