terraform {
  required_providers {
    queuey = {
      source = "queuey/queuey"
    }
  }
}

# Every setting may come from the environment instead (QUEUEY_ENDPOINT,
# QUEUEY_USERNAME, QUEUEY_PASSWORD, ...), which keeps the password out of
# the configuration. Left out entirely, the provider talks to a local
# RabbitMQ as guest/guest.
provider "queuey" {
  endpoint = "http://127.0.0.1:15672"
  username = "guest"
  password = "guest"
}
